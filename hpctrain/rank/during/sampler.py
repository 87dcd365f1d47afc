"""One sampler per node, beside the ranks: what the GPUs (or, on a CPU node, the ranks) did.

The node's launch step (`rank launch`, `rank agent`: one process per node; every torchrun
launch goes through one of them) starts it (start()) as a child of its own; under the tasks
launcher (one process per rank, no per-node process: JAX), the node's first task (SLURM_LOCALID
0) does, from its bootstrap: `python RUN_DIR/rank sample RUN_DIR PARENT NNODES`. Every few seconds
(bootstrap.json's sample_every) it appends one line to RUN_DIR/usage/NODE.jsonl:

    {"kind": "start", "time", "node", "job_id", "attempt", "interval", "nnodes", "cpus", "pid"}
                                         once per attempt ("cpus": the CPUs usable on this node)
    {"kind": "gpu", "index", "uuid", "mem_total"}                                  once per GPU
    {"t": TIME, "g": [[index, util %, memory used MiB, power W], ...]}              a GPU sample
    {"t": TIME, "r": [[rank, cpu % of one core, rss KiB], ...]}                     a CPU node's sample
    {"kind": "first_step", "time"}       the first progress report of this attempt was seen
    {"kind": "cost", "time", "cpu_s", "child_cpu_s", "wall_s"}  the sampler's own CPU time
    {"kind": "error", "time", "error"}   what went wrong in the sampler (never the job's error)
    {"kind": "end", ...}                 as "cost", when it ends

The GPUs are read from one long-lived `nvidia-smi --query-gpu=... --format=csv,noheader,nounits
-lms N`, parsed as it streams (no process started per sample); without nvidia-smi (or when it
fails) the ranks of this node are read from /proc instead.

On the Slurm head node it also records the allocation at the start of each attempt
(`scontrol show job -o`: status/allocation-JOB-ATTEMPT.json): the report's GPU-hours where the
cluster keeps no accounting for sacct to answer.

Idle GPUs (bootstrap.json's idle_gpus {below, for, gpus}): each node writes status/idle-NODE.json
when all of the job's GPUs on it (own_gpus: Slurm's binding, else the planned count; never
another job's on a shared node) went below the threshold, from the start on: a run stuck before
its first step idles too (and when they came back); once every node's have stayed
below for the window, status/idle-stop.json records it and this node's ranks get SIGTERM — the
stop path of a preemption: they save at the next iteration boundary and exit, and the batch shell
ends the job as stopped for idle GPUs (`rank idle-stopped`), not requeued.

It never fails the job and never outlives the launch: it dies with its parent (PR_SET_PDEATHSIG,
and the parent's pid checked at every sample), its own errors become an "error" line, and it
exits 0. Standard library only.
"""
from __future__ import annotations

import glob
import itertools
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time

QUERY = "index,uuid,utilization.gpu,memory.used,memory.total,power.draw"
MAX_GPU_ROWS = 64  # rows of one sample (GPUs of a node): more is not nvidia-smi's answer
MAX_LINES = 400_000  # lines one sampler writes per attempt: ~2 weeks at 5 s with 8 GPUs
COST_EVERY = 60.0  # seconds between two "cost" lines
_CLK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_NODE_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def node_file_stem(node: str) -> str:
    """The node's name as its files are named (usage/STEM.jsonl, status/idle-STEM.json): a
    node name is the scheduler's, and only these characters are safe in a file name."""
    return _NODE_SAFE.sub("_", node)[:200] or "node"


def _nnodes(torchrun_args: list[str]) -> int:
    for i, arg in enumerate(torchrun_args):
        value = None
        if arg.startswith("--nnodes="):
            value = arg.split("=", 1)[1]
        elif arg == "--nnodes" and i + 1 < len(torchrun_args):
            value = torchrun_args[i + 1]
        if value:
            last = value.split(":")[-1]
            return int(last) if last.isdigit() and int(last) > 0 else 1
    return 1


def _settings(run_dir: str) -> tuple[float, dict | None]:
    """(sample interval in seconds, idle_gpus {below, for} or None) from bootstrap.json."""
    from ..records import read_json
    data = read_json(os.path.join(run_dir, "bootstrap.json"))  # a regular file, bounded
    data = data if isinstance(data, dict) else {}
    every = data.get("sample_every", 5)
    idle = data.get("idle_gpus")
    every = float(every) if isinstance(every, (int, float)) and not isinstance(every, bool) else 5.0
    if not (isinstance(idle, dict) and isinstance(idle.get("below"), (int, float))
            and isinstance(idle.get("for"), (int, float))):
        idle = None
    return every, idle


def own_gpus(env, planned: int) -> tuple[set, set] | None:
    """(indices, UUIDs) of the GPUs this node's part of the job was given: Slurm's binding
    (SLURM_STEP_GPUS, SLURM_JOB_GPUS: nvidia-smi's indices), else CUDA_VISIBLE_DEVICES (indices
    or UUIDs); where none says (count-only GRES, a site without binding, the local site): the
    GPUs the job planned per node, 0..planned-1, the ones its ranks take by local rank. None
    (every GPU) only when not even the plan says."""
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        words = [w.strip() for w in env.get(name, "").split(",")[:1024] if w.strip()]
        if words:
            return ({int(w) for w in words if w.isdigit() and len(w) < 6},
                    {w for w in words if w.startswith(("GPU-", "MIG-")) and len(w) < 128})
    return (set(range(min(planned, 1024))), set()) if planned > 0 else None


def _planned_gpus(run_dir: str) -> int:
    """The GPUs per node the job asked for: idle_gpus "gpus" in bootstrap.json (plan.py)."""
    _, idle = _settings(run_dir)
    gpus = (idle or {}).get("gpus")
    return gpus if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus > 0 else 0


def tasks_nnodes() -> int:
    """The tasks launcher's node count, from the task variables srun (or hpctrain's own
    launch_tasks, with the same names) gives each rank."""
    env = os.environ
    nodes = env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or ""
    if nodes.isdigit() and int(nodes) > 0:
        return int(nodes)
    total, per = env.get("SLURM_NTASKS", ""), env.get("SLURM_NTASKS_PER_NODE", "").split("(")[0]
    if total.isdigit() and per.isdigit() and int(per) > 0:
        return max(1, int(total) // int(per))
    return 1


def start(torchrun_args: list[str] | None = None, nnodes: int | None = None) -> int | None:
    """Start this node's sampler as a child of this process (it ends with it); its pid, or None
    (no run, sampling off, or it could not start: the launch goes on without it). From the
    launch step (`rank launch`, `rank agent`: torchrun's arguments give the node count), or
    from the first task of a node under the tasks launcher (bootstrap.py: `nnodes` given)."""
    run_dir = os.environ.get("HPCTRAIN_RUN_DIR")
    if not run_dir:
        return None
    try:
        every, _ = _settings(run_dir)
        if every <= 0:
            return None
        from ..records import RANK_FOLDER
        here = RANK_FOLDER
        proc = subprocess.Popen(
            [sys.executable, here, "sample", run_dir, str(os.getpid()),
             str(nnodes if nnodes is not None else _nnodes(torchrun_args or []))],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=True)
        return proc.pid
    except Exception as exc:  # noqa: BLE001 (sampling is a report: never a reason to fail)
        print(f"hpctrain: the GPU sampler did not start: {exc}", file=sys.stderr, flush=True)
        return None


# ----------------------------------------------------------------------------- the process

def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG: SIGTERM when the process that started this one ends (Linux)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)
    except Exception:  # noqa: BLE001 (not Linux: the parent's pid is checked at every sample)
        pass


def _cpu_seconds(pid: str = "self") -> tuple[float, float]:
    """(own utime+stime, reaped children's cutime+cstime) of a process, in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK, (int(fields[13]) + int(fields[14])) / _CLK
    except (OSError, IndexError, ValueError):
        return 0.0, 0.0


def _usable_cpus() -> int | None:
    """The CPUs the job's processes on this node may run on (Slurm's cgroup or the affinity a
    launcher gave): what a CPU node's efficiency is measured against. Slurm's count of the
    node's allocated CPUs first: a task's own affinity can be narrower (the tasks launcher)."""
    on_node = os.environ.get("SLURM_CPUS_ON_NODE", "")
    if on_node.isdigit() and int(on_node) > 0:
        return int(on_node)
    try:
        return len(os.sched_getaffinity(0)) or None
    except (AttributeError, OSError):
        return os.cpu_count()


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # [N/A], [Not Supported]


def parse_line(line: str) -> tuple | None:
    """One csv,noheader,nounits line of QUERY: (index, uuid, util, mem used, mem total, power)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 6 or not parts[0].isdigit():
        return None
    return (int(parts[0]), parts[1][:80], _number(parts[2]), _number(parts[3]),
            _number(parts[4]), _number(parts[5]))



def allocation_of(text: str) -> dict:
    """`scontrol show job -o`'s record -> what the job was allocated: its TRES (22.05 calls them
    TRES, 24.11 AllocTRES), GPUs, CPUs, nodes and start time."""
    fields = dict(re.findall(r"(?:^|\s)([A-Za-z/]+)=(\S*)", text))
    tres = fields.get("AllocTRES") or fields.get("TRES") or ""
    found = re.search(r"gres/gpu=([0-9]+)", tres)
    cpus = fields.get("NumCPUs", "")
    nodes = fields.get("NumNodes", "").split("-")[0]
    return {"tres": tres[:1000], "gpus": int(found.group(1)) if found else 0,
            "cpus": int(cpus) if cpus.isdigit() else None,
            "nodes": int(nodes) if nodes.isdigit() else None,
            "start_time": fields.get("StartTime", "")[:40]}

class Sampler:
    def __init__(self, run_dir: str, parent: int, nnodes: int):
        self.run_dir, self.parent, self.nnodes = run_dir, parent, nnodes
        self.status = os.path.join(run_dir, "status")
        self.node = node_name()
        self.every, self.idle = _settings(run_dir)
        self.every = max(self.every, 0.2)
        self.job_id = os.environ.get("HPCTRAIN_JOB_ID") or os.environ.get("SLURM_JOB_ID") or ""
        self.attempt = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
        from ..records import open_append
        self.out = open_append(os.path.join(run_dir, "usage", node_file_stem(self.node) + ".jsonl"),
                               run_dir, "a", buffering=1)  # never through a planted link
        self.lines = 0
        self.began = time.time()
        self.mono = time.monotonic()
        self.last_cost = self.mono
        self.child: subprocess.Popen | None = None
        self.child_cpu = 0.0
        self.seen_gpus: set = set()
        self.idle_since: float | None = None
        self.stopped = False
        self.own_gpus = own_gpus(os.environ, _planned_gpus(run_dir))
        self.first_step = False
        self.cpu_prev: dict[int, tuple[float, float]] = {}

    def write(self, record: dict) -> None:
        if self.lines >= MAX_LINES:
            return
        self.lines += 1
        if self.lines == MAX_LINES:
            record = {"kind": "error", "time": time.time(),
                      "error": f"{MAX_LINES} lines written: no more samples this attempt"}
        self.out.write(json.dumps(record, separators=(",", ":")) + "\n")

    def error(self, what: str) -> None:
        self.write({"kind": "error", "time": time.time(), "error": what[:500]})

    def parent_alive(self) -> bool:
        return os.getppid() == self.parent

    # --- cost and allocation

    def cost(self, kind: str = "cost") -> None:
        own, reaped = _cpu_seconds()
        child = self.child_cpu
        if self.child is not None and self.child.poll() is None:
            child = sum(_cpu_seconds(str(self.child.pid)))
        self.write({"kind": kind, "time": time.time(), "cpu_s": round(own, 3),
                    "child_cpu_s": round(max(child, reaped), 3),
                    "wall_s": round(time.monotonic() - self.mono, 3)})
        self.last_cost = time.monotonic()

    def allocation(self) -> None:
        """The head node of a Slurm job: what the scheduler allocated to this attempt."""
        job = os.environ.get("SLURM_JOB_ID")
        if not job or os.environ.get("SLURM_NODEID", "0") != "0" or not job.isdigit():
            return
        from .. import tools
        try:  # bounded: read as it comes, stopped past the cap
            out = tools.run(["scontrol", "show", "job", "-o", job], timeout=20, limit=1 << 20)
        except (OSError, subprocess.SubprocessError) as exc:
            self.error(f"scontrol show job: {exc}")
            return
        if out.returncode != 0:
            said = out.stderr.decode("utf-8", "replace").strip()[:200]
            self.error(f"scontrol show job exited {out.returncode}: {said}")
            return
        from ..records import write_json
        write_json(os.path.join(self.status, f"allocation-{job}-{self.attempt}.json"), dict(
            allocation_of(out.stdout[:65536].decode("utf-8", "replace")),
            source="scontrol", job_id=job, attempt=self.attempt, time=time.time()), root=self.run_dir)

    # --- progress and idle

    def watch_progress(self, now: float) -> None:
        if self.first_step:
            return
        for path in glob.glob(os.path.join(self.status, "progress-*.json")):
            try:
                if os.stat(path).st_mtime >= self.began:
                    self.first_step = True
                    self.write({"kind": "first_step", "time": now})
                    return
            except OSError:
                continue

    def owns(self, index: int, uuid: str) -> bool:
        """Whether this GPU is the job's: another job's GPU on a shared node is never judged."""
        return self.own_gpus is None or index in self.own_gpus[0] or uuid in self.own_gpus[1]

    def idle_path(self, node: str) -> str:
        return os.path.join(self.status, f"idle-{node_file_stem(node)}.json")

    def check_idle(self, now: float, utils: list) -> None:
        # The window counts from the sampler's start too: a run stuck before training (or one
        # that never reports progress) idles its GPUs as surely as one stuck after its first
        # step, and costs the most. The window is long beside starting and loading; a rank
        # signalled before its stop handler is in ends at once, and the batch shell still says
        # STOPPED (rank idle-stopped), not failed.
        if self.idle is None or self.stopped or not utils:
            return
        below, window = float(self.idle["below"]), float(self.idle["for"])
        idle = all(u is not None and u < below for u in utils)
        from ..records import read_bytes, write_json
        if idle and self.idle_since is None:
            self.idle_since = now
            write_json(self.idle_path(self.node), {"node": self.node, "idle": True, "since": now,
                                                   "job_id": self.job_id, "attempt": self.attempt},
                       root=self.run_dir)
        elif not idle and self.idle_since is not None:
            self.idle_since = None
            write_json(self.idle_path(self.node), {"node": self.node, "idle": False, "since": now,
                                                   "job_id": self.job_id, "attempt": self.attempt},
                       root=self.run_dir)
        if self.idle_since is None or now - self.idle_since < window:
            return
        nodes, latest = [], 0.0
        for path in itertools.islice(glob.iglob(os.path.join(self.status, "idle-*.json")), 4096):
            if os.path.basename(path) == "idle-stop.json":
                continue
            try:
                rec = json.loads(read_bytes(path, 65536))  # a regular file, bounded
            except (OSError, ValueError):
                continue
            if (isinstance(rec, dict) and rec.get("idle") is True
                    and rec.get("job_id") == self.job_id and rec.get("attempt") == self.attempt
                    and isinstance(rec.get("since"), (int, float)) and now - rec["since"] >= window):
                nodes.append(str(rec.get("node")))
                latest = max(latest, rec["since"])
        if len(nodes) < self.nnodes:
            return
        self.stopped = True
        stop = os.path.join(self.status, "idle-stop.json")
        if not os.path.exists(stop):
            write_json(stop, {"below": below, "for": window, "since": latest, "time": now,
                              "nodes": sorted(nodes), "job_id": self.job_id,
                              "attempt": self.attempt}, root=self.run_dir)
        self.write({"kind": "idle_stop", "time": now, "below": below, "for": window})
        self.signal_ranks()

    def signal_ranks(self) -> None:
        """SIGTERM to this node's ranks of the run: "save now", as a preemption says it."""
        from ..records import read_identities
        for ident in read_identities(self.run_dir):
            if not ident.pid or ident.node != self.node:
                continue
            try:
                with open(f"/proc/{ident.pid}/environ", "rb") as f:
                    if f"HPCTRAIN_RUN_DIR={self.run_dir}".encode() not in f.read().split(b"\0"):
                        continue
                os.kill(ident.pid, signal.SIGTERM)
            except (OSError, ProcessLookupError):
                continue

    # --- the loops

    def tick(self, now: float) -> None:
        self.watch_progress(now)
        if time.monotonic() - self.last_cost >= COST_EVERY:
            self.cost()

    def gpus(self) -> bool:
        """Stream nvidia-smi until the parent ends; False when it could not (then the CPU loop)."""
        ms = str(max(100, int(self.every * 1000)))
        try:
            self.child = subprocess.Popen(
                ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-lms", ms],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                preexec_fn=_die_with_parent)
        except OSError as exc:
            self.child = None
            if not isinstance(exc, FileNotFoundError):
                self.error(f"nvidia-smi: {exc}")
            return False
        fd = self.child.stdout.fileno()
        buf, group, samples = b"", [], 0
        while self.parent_alive():
            ready, _, _ = select.select([fd], [], [], min(self.every, 1.0))
            if not ready:
                if group:
                    self.flush(group)
                    samples += 1
                    group = []
                self.tick(time.time())
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            buf = buf[-4096:]
            for raw in lines:
                row = parse_line(raw.decode("utf-8", "replace"))
                if row is None:
                    continue
                if any(r[0] == row[0] for r in group) or len(group) >= MAX_GPU_ROWS:
                    self.flush(group)
                    samples += 1
                    group = []
                group.append(row)
            if group and not select.select([fd], [], [], 0.05)[0]:
                self.flush(group)
                samples += 1
                group = []
        if group:
            self.flush(group)
            samples += 1
        if self.parent_alive():  # nvidia-smi ended on its own
            try:
                err = self.child.stderr.read(2000).decode("utf-8", "replace").strip()
                code = self.child.wait(timeout=5)
            except (OSError, subprocess.SubprocessError):
                err, code = "", None
            self.error(f"nvidia-smi exited {code}: {err}")
            self.child = None
            return samples > 0
        return True

    def flush(self, group: list) -> None:
        now = time.time()
        for index, uuid, _, _, total, _ in group:
            if (index, uuid) not in self.seen_gpus:
                self.seen_gpus.add((index, uuid))
                self.write({"kind": "gpu", "index": index, "uuid": uuid, "mem_total": total})
        self.write({"t": round(now, 3), "g": [[r[0], r[2], r[3], r[5]] for r in group]})
        self.check_idle(now, [r[2] for r in group if self.owns(r[0], r[1])])
        self.tick(now)

    def ranks(self) -> None:
        """A node without GPUs: each of its ranks' CPU use and RSS, from /proc."""
        from ..records import read_identities
        mine: dict[int, int] = {}
        expected = 0
        listed = 0.0
        while self.parent_alive():
            now = time.time()
            # Ranks write their identity as they start, one after another: look every sample
            # until each of this node's local ranks is known, then twice a minute.
            if now - listed >= 30 or not mine or len(mine) < expected:
                listed = now
                found = [i for i in read_identities(self.run_dir)
                         if i.pid and i.node == self.node and i.started >= self.began - 60]
                mine = {i.pid: i.rank for i in found}
                expected = max((i.local_world_size for i in found), default=0)
            rows = []
            for pid, rank in sorted(mine.items(), key=lambda kv: kv[1]):
                cpu = sum(_cpu_seconds(str(pid))[:1])
                try:
                    with open(f"/proc/{pid}/status") as f:
                        rss = next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), None)
                except (OSError, ValueError, IndexError):
                    continue
                if rss is None:  # a zombie: the rank has ended and its memory is gone
                    continue
                before = self.cpu_prev.get(pid)
                self.cpu_prev[pid] = (now, cpu)
                if before is None or now <= before[0]:
                    continue
                rows.append([rank, round(100.0 * (cpu - before[1]) / (now - before[0]), 1), rss])
            if rows:
                self.write({"t": round(now, 3), "r": rows})
            self.tick(now)
            time.sleep(self.every)

    def run(self) -> None:
        self.write({"kind": "start", "time": self.began, "node": self.node, "job_id": self.job_id,
                    "attempt": self.attempt, "interval": self.every, "nnodes": self.nnodes,
                    "cpus": _usable_cpus(), "pid": os.getpid()})
        try:
            os.unlink(self.idle_path(self.node))  # an earlier attempt's
        except OSError:
            pass
        try:
            self.allocation()
        except Exception as exc:  # noqa: BLE001
            self.error(f"allocation: {exc!r}")
        if not self.gpus():
            self.ranks()

    def close(self) -> None:
        if self.child is not None and self.child.poll() is None:
            self.child_cpu = sum(_cpu_seconds(str(self.child.pid)))
            self.child.terminate()
            try:
                self.child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.child.kill()
        self.cost("end")
        self.out.close()


def _terminate(signum, frame):
    raise SystemExit(0)


def main(run_dir: str, parent: int, nnodes: int) -> int:
    _die_with_parent()
    if os.getppid() != parent:
        return 0  # the launch already ended
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is the launch's to handle
    signal.signal(signal.SIGHUP, _terminate)
    try:
        sampler = Sampler(run_dir, parent, nnodes)
    except Exception:  # noqa: BLE001 (no run directory to write to: nothing to record)
        return 0
    try:
        sampler.run()
    except SystemExit:
        pass
    except Exception as exc:  # noqa: BLE001
        try:
            sampler.error(f"{type(exc).__name__}: {exc}")
        except Exception:  # noqa: BLE001
            pass
    finally:
        try:
            sampler.close()
        except BaseException:  # noqa: BLE001
            pass
    return 0


# ----------------------------------------------------------------------------- the stop's record

def idle_stopped(run_dir: str, status: int, started: float = 0.0) -> int:
    """The batch shell, after the launch the sampler stopped (status/idle-stop.json): the stop's
    record (status/stopped.json, as any stop: where, what was saved) said as a stop for idle GPUs,
    and status/failure.json (reason idle_gpus) so that every backend's status names it. Exit 1
    when a rank failed with an error of its own: then the run failed, and the shell says so."""
    from ..end.ending import stopped
    from ..records import JobFailure, now, read_json, write_job_failure, write_json
    try:
        idle = read_json(os.path.join(run_dir, "status", "idle-stop.json"))
    except Exception:  # noqa: BLE001
        idle = {}
    idle = idle if isinstance(idle, dict) else {}
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):
        if stopped(run_dir, "TERM", status, started) != 0:
            return 1
    path = os.path.join(run_dir, "status", "stopped.json")
    record = read_json(path)
    below, window = idle.get("below"), idle.get("for")
    words = (f"every GPU below {below:g}% for {_duration(window)}"
             if isinstance(below, (int, float)) and isinstance(window, (int, float)) else "the GPUs idled")
    message = str(record.get("message", "")).replace("(SIGTERM)", f"(idle GPUs: {words})", 1)
    record.update(reason="idle_gpus", message=message, idle=idle)
    write_json(path, record, root=run_dir)
    write_job_failure(run_dir, JobFailure(
        reason="idle_gpus", exit_status=143, message=f"stopped {message}",
        job_id=os.environ.get("SLURM_JOB_ID") or os.environ.get("HPCTRAIN_JOB_ID"),
        job_restart=int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0),
        node=node_name(), time=now()))
    print(f"STOPPED {message} (not requeued)")
    return 0


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"

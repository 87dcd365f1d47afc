"""The per-rank bootstrap: prepares one rank's process, then runs the user's program in it.

Standard library only: it runs under whatever interpreter the job uses (Isaac Sim's python, a
container's), copied into the run directory and called by path:

    python -m torch.distributed.run ... RUN_DIR/bootstrap.py RUN_DIR/bootstrap.json -- PROGRAM ARGS

It never creates the process group (every RL library does that itself, and a second init
fails). In order, it: works out the rank's identity; tees the rank's output into
logs/rank-R.log with a "[rank R]" prefix on the console; sets per-rank environment (threads,
seed offset, quiet non-zero ranks); in CPU mode installs the library's CPU shims; pins
cuda:LOCAL_RANK when torch is imported; runs the program in this same process (so the above
applies to it) and exits with its status, leaving status/rank-R.failed behind on failure.
"""
from __future__ import annotations

import datetime
import glob
import json
import os
import re
import runpy
import signal
import socket
import sys
import threading
import time
import traceback

# ----------------------------------------------------------------------------- import hooks
# The one post-import hook of hpctrain: pin_device uses it here, and cpu_mode.install takes it
# (cpu_mode imports it from this module when used on its own).

class _AfterImport:
    """A meta-path finder that runs callbacks right after a named module has been executed.

    It never loads anything itself: it asks the other finders for the real spec and wraps that
    spec's loader's exec_module once (an instance attribute, removed at the first call), so the
    module keeps its normal loader, __spec__ and __file__.
    """

    def __init__(self) -> None:
        self.hooks: dict[str, list] = {}
        self.lock = threading.RLock()

    def find_spec(self, fullname, path=None, target=None):
        with self.lock:
            if fullname not in self.hooks:
                return None
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module):
            try:
                del loader.exec_module  # one shot: the class's own method again
            except AttributeError:
                pass
            original(module)
            if getattr(module, "__name__", None) == fullname:
                with self.lock:
                    hooks = self.hooks.pop(fullname, [])
                for fn in hooks:
                    _call_hook(fullname, fn, module)

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):  # a loader without an instance dict: no hook
            pass
        return spec


def _call_hook(name: str, fn, module) -> None:
    # A hook that no longer fits a library release must not break the user's import: say so
    # loudly and let the library run as it would without it.
    try:
        fn(module)
    except Exception as exc:  # noqa: BLE001
        print(f"hpctrain: warning: post-import hook for {name} failed: {exc!r}", file=sys.stderr,
              flush=True)


_FINDER = _AfterImport()


def after_import(name: str, fn) -> None:
    """Run fn(module) once `name` is imported (at once if it already is)."""
    with _FINDER.lock:
        module = sys.modules.get(name)
        if module is None:
            _FINDER.hooks.setdefault(name, []).append(fn)
            if _FINDER not in sys.meta_path:
                sys.meta_path.insert(0, _FINDER)
            return
    _call_hook(name, fn, module)


# ----------------------------------------------------------------------------- identity

def identity(config: dict) -> dict:
    """This rank's place in the job, from torchrun's variables or Slurm's task variables."""
    env = os.environ
    if config.get("launcher") == "tasks" and "RANK" not in env:
        # One Slurm task per rank (JAX): Slurm's ids are the ranks.
        rank = int(env.get("SLURM_PROCID", "0"))
        local = int(env.get("SLURM_LOCALID", "0"))
        world = int(env.get("SLURM_NTASKS", "1"))
        local_world = int(env.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0])
    else:
        rank = int(env.get("RANK", "0"))
        local = int(env.get("LOCAL_RANK", "0"))
        world = int(env.get("WORLD_SIZE", "1"))
        local_world = int(env.get("LOCAL_WORLD_SIZE", "1"))
    return {"rank": rank, "local_rank": local, "world_size": world,
            "local_world_size": local_world, "node": env.get("SLURMD_NODENAME") or socket.gethostname()}


# ----------------------------------------------------------------------------- output

def tee_output(path: str, prefix: str) -> None:
    """Send fds 1 and 2 through a child that writes them to `path` and, prefixed, to the console.

    A child process rather than a thread: it outlives a crash of this process and drains the
    last lines (the traceback) after it; it ignores the signals Slurm and torchrun send, and ends
    when the last writer closes the pipe.
    """
    console = os.dup(1)
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(write_end)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_IGN)
        head = prefix.encode()
        pending = b""
        with open(path, "ab", buffering=0) as log:
            while True:
                try:
                    chunk = os.read(read_end, 65536)
                except InterruptedError:
                    continue
                if not chunk:
                    break
                log.write(chunk)
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if lines:
                    _write_all(console, b"".join(head + line + b"\n" for line in lines))
            if pending:
                _write_all(console, head + pending + b"\n")
        os._exit(0)
    os.close(read_end)
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    os.close(write_end)
    os.close(console)


def _write_all(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass  # the console went away; the log file still has everything


# ----------------------------------------------------------------------------- environment

def gpu_present() -> bool:
    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.isdir("/proc/driver/nvidia/gpus") \
        and bool(os.listdir("/proc/driver/nvidia/gpus"))


def cpu_mode_wanted(setting: str) -> bool:
    if setting == "on":
        return True
    if setting == "off":
        return False
    return not gpu_present()


def apply_site_env(config: dict) -> None:
    """The site's set (NCCL interface, IB HCA, debug level, …): first, before any library import
    reads it. The job's own env, already exported by the script, wins."""
    for name, value in (config.get("env") or {}).items():
        os.environ.setdefault(name, value)


def node_cpus() -> int:
    """The CPUs this node gives the job: Slurm's count, else this process's affinity."""
    text = os.environ.get("SLURM_CPUS_ON_NODE", "")
    if text.isdigit() and int(text) > 0:
        return int(text)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def set_environment(config: dict, me: dict) -> None:
    env = os.environ
    if not config.get("threads_from_env"):
        # torchrun sets OMP_NUM_THREADS=1 for every rank; the node's CPUs shared among its ranks
        # are what each really has (more threads than that only oversubscribe).
        threads = str(max(1, node_cpus() // max(1, me["local_world_size"])))
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[name] = threads
    seed = config.get("seed")
    if seed is not None:
        env["HPCTRAIN_BASE_SEED"] = str(seed)
        env["HPCTRAIN_SEED"] = str(int(seed) + me["rank"])  # global rank: distinct on every node
    env["HPCTRAIN_RANK"] = str(me["rank"])
    env["HPCTRAIN_IS_MAIN"] = "1" if me["rank"] == 0 else "0"
    if me["rank"] != 0:
        env.setdefault("TQDM_DISABLE", "1")  # one progress bar per job, not one per rank
    timeout = config.get("collective_timeout")
    if timeout:
        env["HPCTRAIN_COLLECTIVE_TIMEOUT"] = str(timeout)
        apply_collective_timeout(int(timeout))
    if config.get("preempt_signal"):
        env["HPCTRAIN_PREEMPT_SIGNAL"] = "SIG" + config["preempt_signal"]
    for name in config.get("unset_env") or ():
        env.pop(name, None)
    values = dict(me, head=env.get("HPCTRAIN_HEAD", "localhost"),
                  spare_port=env.get("HPCTRAIN_SPARE_PORT", ""))
    for name, template in (config.get("rank_env") or {}).items():
        env[name] = template.format(**values)


def apply_collective_timeout(seconds: int) -> None:
    """Make `seconds` torch.distributed's default process-group timeout.

    init_process_group, new_group and friends call distributed_c10d._get_default_timeout when no
    timeout is passed (10 min for NCCL, 30 min for gloo in torch 2.x); replacing it makes every
    such call — the library's own included — use the job's launcher.collective_timeout, while an
    explicit timeout= in the program still wins.
    """
    def patch(c10d):
        import datetime as _dt
        c10d._get_default_timeout = lambda backend: _dt.timedelta(seconds=seconds)
    after_import("torch.distributed.distributed_c10d", patch)


# ----------------------------------------------------------------------------- resume

_SKIP = re.compile(r"(^\.|\.(tmp|part|partial)$)")


def _natural(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def find_checkpoint(run_dir: str, patterns: list[str]) -> str | None:
    """The newest checkpoint matching `patterns` (relative to run_dir), or None."""
    found = set()
    for pattern in patterns:
        full = pattern if os.path.isabs(pattern) else os.path.join(run_dir, pattern)
        found.update(glob.glob(full, recursive=True))
    best, best_key = None, None
    for path in found:
        if _SKIP.search(os.path.basename(path)):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue  # removed since the glob (a rotated checkpoint)
        if os.path.isfile(path) and st.st_size == 0:
            continue
        key = (st.st_mtime_ns, _natural(os.path.basename(path)))
        if best_key is None or key > best_key:
            best, best_key = path, key
    return os.path.abspath(best) if best else None


def resume_argv(argv: list[str], template: list[str], checkpoint: str) -> list[str]:
    """argv with the library's resume option (see libraries/base.py, resume_args)."""
    d = os.path.dirname(checkpoint)
    values = {"checkpoint": checkpoint, "name": os.path.basename(checkpoint), "dir": d,
              "dirname": os.path.basename(d), "parent": os.path.dirname(d)}
    words = [w.format(**values) for w in template]
    out = list(argv)
    if words and words[0].startswith("-"):
        opt = words[0]
        for i, a in enumerate(out):
            if a == opt and len(words) > 1 and i + 1 < len(out):
                out[i + 1] = words[1]
                words = words[2:]
                break
            if a.startswith(opt + "=") and len(words) > 1:
                out[i] = f"{opt}={words[1]}"
                words = words[2:]
                break
    extra, i = [], 0
    while i < len(words):
        w = words[i]
        is_flag = w.startswith("-") and (i + 1 >= len(words) or words[i + 1].startswith("-"))
        if not (is_flag and w in out):
            extra.append(w)
        i += 1
    return out + extra


def prepare_resume(config: dict, run_dir: str, argv: list[str], me: dict) -> list[str]:
    os.environ["HPCTRAIN_CHECKPOINT_DIR"] = os.path.join(run_dir, "checkpoints")
    resume = config.get("resume") or {}
    patterns = resume.get("patterns") or []
    checkpoint = find_checkpoint(run_dir, patterns) if patterns else None
    if checkpoint is None:
        os.environ.pop("HPCTRAIN_RESUME_FROM", None)
        return argv
    os.environ["HPCTRAIN_RESUME_FROM"] = checkpoint
    new = resume_argv(argv, resume.get("args") or [], checkpoint)
    if me["rank"] == 0:
        print(f"hpctrain: resuming from {checkpoint} (job restart "
              f"{os.environ.get('SLURM_RESTART_COUNT', '0')}, torchrun restart "
              f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')})", file=sys.stderr)
    return new


def pin_device(me: dict) -> None:
    """cuda:LOCAL_RANK once torch is imported, with every GPU of the node left visible."""
    local = me["local_rank"]

    def pin(torch):
        if not torch.cuda.is_available():
            return
        count = torch.cuda.device_count()
        if local < count:
            torch.cuda.set_device(local)
        else:
            print(f"hpctrain: warning: rank {me['rank']} has LOCAL_RANK {local} but only {count} "
                  "GPU(s) are visible (per-rank CUDA_VISIBLE_DEVICES?): using cuda:0",
                  file=sys.stderr)
            torch.cuda.set_device(0)
    after_import("torch", pin)


def install_cpu_shims(library: str) -> list[str]:
    try:
        from . import cpu_mode  # type: ignore[attr-defined]  # as hpctrain.bootstrap
    except ImportError:
        here = os.path.dirname(os.path.abspath(__file__))
        if here not in sys.path:
            sys.path.insert(0, here)
        try:
            import cpu_mode  # copied beside this file
        except ImportError:
            return []
    return cpu_mode.install(library, after_import=after_import)


# ----------------------------------------------------------------------------- rank check

class RankCheckError(RuntimeError):
    """Not every rank arrived at the preflight's rank check in time."""


def rank_check(me: dict, timeout: float) -> float:
    """The preflight's tiny collective: every rank of this attempt meets every other one.

    The node-level preflight (preflight.py) proves that the nodes reach the head; this proves
    that every rank torchrun started is alive and reaches rank 0's node, before the program
    spends minutes building its environments. It must not create torch's process group (the
    program or its library does, and a second init fails), so it is a counter in a small
    TCPStore of its own: rank 0 hosts it on HPCTRAIN_SPARE_PORT of its node (MASTER_ADDR,
    which torchrun gives every rank), every rank adds 1 and waits until the count is WORLD_SIZE.
    A rank that does not arrive within `timeout` (launcher.preflight_timeout) is named, with
    its node where a rank of the same node arrived. The store is gone before the program
    starts; a torchrun restart runs the check again with a new store. Returns the seconds spent
    (waiting for the slowest rank included, torch's import not).
    """
    import datetime as _dt
    # Only torchrun jobs get here, whose program imports torch anyway: the import is not extra.
    from torch.distributed import TCPStore

    start = time.monotonic()
    env, rank, world = os.environ, me["rank"], me["world_size"]
    host, port = env["MASTER_ADDR"], int(env["HPCTRAIN_SPARE_PORT"])
    if env.get("HPCTRAIN_TEST_RANK_CHECK_LATE") == str(rank):
        time.sleep(timeout + 20)  # tests only: this rank arrives after everyone gave up
    deadline = start + timeout
    limit = _dt.timedelta(seconds=max(1.0, timeout))
    try:
        store = TCPStore(host, port, world_size=None, is_master=rank == 0, timeout=limit,
                         wait_for_workers=False)
    except Exception as exc:  # noqa: BLE001 (the store raises several kinds)
        raise RankCheckError(f"rank {rank} on {me['node']} cannot reach rank 0's check store "
                             f"{host}:{port} (HPCTRAIN_SPARE_PORT) within {timeout:g} s: {exc}"
                             ) from None
    try:
        store.set(f"rank/{rank}", me["node"])
        arrived = store.add("arrived", 1)
        while arrived < world and time.monotonic() < deadline:
            time.sleep(0.05)
            arrived = store.add("arrived", 0)
        if arrived < world:
            # Rank 0 names the missing ranks once for everyone and leaves last, so that no rank
            # reports its store vanishing instead of the real reason.
            if rank == 0:
                verdict = _missing_ranks(store, me, timeout)
                store.set("verdict", verdict)
                _wait_count(store, "left", arrived - 1, time.monotonic() + 5)
                raise RankCheckError(verdict)
            if _wait_key(store, "verdict", time.monotonic() + 5):
                verdict = store.get("verdict").decode()
                store.add("left", 1)
                raise RankCheckError(verdict)
            raise RankCheckError(_missing_ranks(store, me, timeout))
        # Rank 0 hosts the store: it leaves last, once every rank has seen the full count.
        store.add("left", 1)
        if rank == 0:
            _wait_count(store, "left", world, time.monotonic() + 5)
    except RankCheckError:
        raise
    except Exception as exc:  # noqa: BLE001 (the store lost: rank 0 died or left)
        raise RankCheckError(f"rank {rank} on {me['node']} lost rank 0's check store "
                             f"{host}:{port} during the rank check: {exc}") from None
    finally:
        del store
    return time.monotonic() - start


def _missing_ranks(store, me: dict, timeout: float) -> str:
    world, lws = me["world_size"], max(1, me["local_world_size"])
    present = {r: store.get(f"rank/{r}").decode() for r in range(world)
               if store.check([f"rank/{r}"])}

    def where(r: int) -> str:  # torchrun numbers one node's ranks contiguously
        peers = [present[p] for p in range(r - r % lws, r - r % lws + lws) if p in present]
        return f"rank {r} ({peers[0]})" if peers else f"rank {r} (node unknown)"
    missing = [where(r) for r in range(world) if r not in present]
    return (f"{', '.join(missing)} did not reach the rank check within {timeout:g} s "
            f"(launcher.preflight_timeout); {len(present)} of {world} ranks arrived")


def _wait_count(store, key: str, target: int, until: float) -> None:
    while store.add(key, 0) < target and time.monotonic() < until:
        time.sleep(0.02)


def _wait_key(store, key: str, until: float) -> bool:
    while not store.check([key]):
        if time.monotonic() >= until:
            return False
        time.sleep(0.05)
    return True


# ----------------------------------------------------------------------------- running

def run_program(argv: list[str]) -> int:
    """Run the program in this process; return its exit status."""
    if not argv:
        print("hpctrain: bootstrap: no program given", file=sys.stderr)
        return 2
    if argv[0] == "-m" and len(argv) > 1:
        sys.argv = [argv[1], *argv[2:]]
        target = ("module", argv[1])
    elif argv[0].endswith(".py"):
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        target = ("path", argv[0])
    else:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execvp(argv[0], argv)  # not Python: hand the process over
    try:
        if target[0] == "module":
            runpy.run_module(target[1], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target[1], run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    return 0


def record_failure(status_dir: str, me: dict, code: int, error: str) -> None:
    try:
        os.makedirs(status_dir, exist_ok=True)
        with open(os.path.join(status_dir, f"rank-{me['rank']}.failed"), "w") as f:
            f.write(f"rank {me['rank']} on {me['node']} exited {code}: {error}\n")
        # The same, for status/failure.json (summarize): the last error of this rank.
        with open(os.path.join(status_dir, f"rank-{me['rank']}.failed.json"), "w") as f:
            json.dump({"rank": me["rank"], "node": me["node"], "exit_status": code,
                       "error": error, "job_restart": int(os.environ.get("SLURM_RESTART_COUNT", 0)),
                       "torchrun_restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)),
                       # Milliseconds: the rank that failed first (the cause) and the peers that
                       # lost it a moment later (the effect) usually share one second.
                       "time": _now("milliseconds")}, f)
    except OSError:
        pass


def record_identity(status_dir: str, me: dict) -> None:
    """status/rank-R.json: which node and pid this rank is, so logs and status can find it."""
    try:
        os.makedirs(status_dir, exist_ok=True)
        path = os.path.join(status_dir, f"rank-{me['rank']}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(dict(me, pid=os.getpid(), started=time.time()), f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


def _now(timespec: str = "seconds") -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec=timespec)


def summarize(run_dir: str, reason: str, status: int, message: str = "") -> int:
    """Write status/failure.json — why the job ended without success — and print one line.

    Called by the batch shell (`bootstrap.py --summarize RUN_DIR REASON STATUS [MESSAGE]`) when
    the launch fails, the preflight fails, or a preempted job is not requeued. REASON: ranks |
    preflight | preempted.
    """
    status_dir = os.path.join(run_dir, "status")
    ranks = []
    for path in sorted(glob.glob(os.path.join(status_dir, "rank-*.failed.json")),
                       key=lambda p: _natural(os.path.basename(p))):
        try:
            with open(path) as f:
                ranks.append(json.load(f))
        except (OSError, ValueError):
            continue
    if not message:
        if ranks:
            first = min(ranks, key=lambda r: r.get("time", ""))
            message = (f"rank {first['rank']} on {first['node']} failed (exit status "
                       f"{first['exit_status']}): {first['error']}")
            if len(ranks) > 1:
                message += f"; {len(ranks) - 1} more rank(s) failed, see ranks"
        else:
            message = (f"the launch exited with status {status} and no rank recorded an error "
                       "(killed by a signal, or torchrun/srun failed): see logs/slurm-*.out")
    summary = {"reason": reason, "exit_status": status, "message": message, "ranks": ranks,
               "job_id": os.environ.get("SLURM_JOB_ID"),
               "job_restart": int(os.environ.get("SLURM_RESTART_COUNT", 0)),
               "node": os.environ.get("SLURMD_NODENAME") or socket.gethostname(), "time": _now()}
    os.makedirs(status_dir, exist_ok=True)
    tmp = os.path.join(status_dir, ".failure.json.tmp")
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    os.replace(tmp, os.path.join(status_dir, "failure.json"))
    print(message)
    return 0


def main(args: list[str]) -> int:
    if args[:1] == ["--summarize"] and len(args) >= 4:
        return summarize(args[1], args[2], int(args[3]), " ".join(args[4:]))
    if len(args) < 2 or args[1] != "--":
        print("usage: bootstrap.py CONFIG.json -- PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    with open(args[0]) as f:
        config = json.load(f)
    apply_site_env(config)
    me = identity(config)
    run_dir = os.environ.get("HPCTRAIN_RUN_DIR") or os.path.dirname(os.path.abspath(args[0]))
    os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
    tee_output(os.path.join(run_dir, "logs", f"rank-{me['rank']}.log"), f"[rank {me['rank']}] ")
    for stale in (f"rank-{me['rank']}.failed", f"rank-{me['rank']}.failed.json"):
        try:  # from an earlier attempt (torchrun restart, requeue): this attempt starts clean
            os.remove(os.path.join(run_dir, "status", stale))
        except OSError:
            pass
    record_identity(os.path.join(run_dir, "status"), me)
    error = ""
    program = args[2:]
    try:
        set_environment(config, me)
        program = prepare_resume(config, run_dir, program, me)
        if cpu_mode_wanted(config.get("cpu_mode", "auto")):
            os.environ["HPCTRAIN_CPU_MODE"] = "1"
            patched = install_cpu_shims(config.get("library", "command"))
            if patched and me["rank"] == 0:
                print("hpctrain: CPU mode: " + "; ".join(patched), file=sys.stderr)
        else:
            pin_device(me)
        program = list(program)
        if config.get("chdir_run_dir"):
            # Programs that write under ./ (DI-engine's ./<exp_name>, Isaac Lab's ./logs) write
            # into the run; the program's own path still means what it did where it was submitted.
            if program and program[0].endswith(".py") and os.path.exists(program[0]):
                program[0] = os.path.abspath(program[0])
            os.chdir(run_dir)
        check = config.get("rank_check_timeout")
        # Only where the job script's torchrun started the ranks (it sets both variables); a
        # bootstrap run by hand or by a benchmark has no peers to meet.
        if check and me["world_size"] > 1 and "MASTER_ADDR" in os.environ \
                and "HPCTRAIN_SPARE_PORT" in os.environ:
            spent = rank_check(me, float(check))
            if me["rank"] == 0:
                print(f"hpctrain: preflight: all {me['world_size']} ranks met in {spent:.2f} s (rank check)",
                      file=sys.stderr)
        code = run_program(program)
    except BaseException as exc:  # the program's own crash: show it, record it, exit non-zero
        traceback.print_exc()
        code, error = 1, f"{type(exc).__name__}: {exc}"
    if code != 0:
        record_failure(os.path.join(run_dir, "status"), me, code, error or f"exit status {code}")
    sys.stdout.flush()
    sys.stderr.flush()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

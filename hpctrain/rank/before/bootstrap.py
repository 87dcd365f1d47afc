"""The per-rank bootstrap: prepares one rank's process, then runs the user's program in it.

Standard library only: it runs under whatever interpreter the job uses (Isaac Sim's python, a
container's), from the run directory's copy of hpctrain/rank/ (see __main__.py):

    python -m torch.distributed.run ... RUN_DIR/rank run RUN_DIR/bootstrap.json

It never creates the process group (every RL library does that itself, and a second init
fails). In order, it: works out the rank's identity; tees the rank's output into
logs/rank-R.log with a "[rank R]" prefix on the console; takes SIGTERM and the preemption signal
as "save now" (stop.py) and SIGQUIT as "print every thread's stack" (the hang watcher's); sets
per-rank environment (threads, seed offset, quiet non-zero ranks); in CPU mode installs the
library's CPU shims; pins cuda:LOCAL_RANK when torch is imported; arms the library's train hooks
(progress, save and stop at an iteration boundary: train_hooks.py); meets the other ranks (the
preflight's rank check); runs the program — read from bootstrap.json, so its arguments arrive byte-exact, untouched by
any shell or launcher — in this same process (so the above applies to it) and exits with its
status, leaving status/rank-R.failed.json behind on failure.
"""
from __future__ import annotations

import atexit
import faulthandler
import glob
import os
import re
import runpy
import signal
import socket
import sys
import traceback

from ..end import stop
from ..end.checkpoints import find_checkpoint
from ..during.hooks import after_import
from ..records import (JobFailure, RankConfig, RankFailure, RankIdentity, clear_rank_failure,
                      clear_stop_request,
                      first_failure, now, open_append, read_job_failure, read_rank_failures,
                      write_identity,
                      write_job_failure, write_rank_failure)

# ----------------------------------------------------------------------------- identity

def identity(config: RankConfig) -> RankIdentity:
    """This rank's place in the job, from torchrun's variables or Slurm's task variables."""
    env = os.environ
    if config.launcher == "tasks" and "RANK" not in env:
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
    return RankIdentity(rank=rank, local_rank=local, world_size=world, local_world_size=local_world,
                        node=env.get("SLURMD_NODENAME") or socket.gethostname())


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
        try:  # never through a link planted at the log's place: then the console alone
            log = open_append(path, os.path.dirname(os.path.dirname(path)), "ab", buffering=0)
        except OSError as exc:
            _write_all(console, head + f"hpctrain: not writing {path}: {exc}\n".encode())
            log = open(os.devnull, "ab", buffering=0)
        with log:
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


def apply_site_env(config: RankConfig) -> None:
    """The site's set (NCCL interface, IB HCA, debug level, …): first, before any library import
    reads it. The job's own env, already exported by the script, wins."""
    for name, value in config.env.items():
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


def set_environment(config: RankConfig, me: RankIdentity) -> None:
    env = os.environ
    if not config.threads_from_env:
        # torchrun sets OMP_NUM_THREADS=1 for every rank; the node's CPUs shared among its ranks
        # are what each really has (more threads than that only oversubscribe).
        threads = str(max(1, node_cpus() // max(1, me.local_world_size)))
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[name] = threads
    if config.seed is not None:
        env["HPCTRAIN_BASE_SEED"] = str(config.seed)
        env["HPCTRAIN_SEED"] = str(config.seed + me.rank)  # global rank: distinct on every node
    env["HPCTRAIN_RANK"] = str(me.rank)
    env["HPCTRAIN_IS_MAIN"] = "1" if me.rank == 0 else "0"
    if me.rank != 0:
        env.setdefault("TQDM_DISABLE", "1")  # one progress bar per job, not one per rank
    if config.collective_timeout:
        env["HPCTRAIN_COLLECTIVE_TIMEOUT"] = str(config.collective_timeout)
        apply_collective_timeout(int(config.collective_timeout))
    if config.preempt_signal:
        env["HPCTRAIN_PREEMPT_SIGNAL"] = "SIG" + config.preempt_signal
    for name in config.unset_env:
        env.pop(name, None)
    values = dict(rank=me.rank, local_rank=me.local_rank, world_size=me.world_size,
                  local_world_size=me.local_world_size, node=me.node,
                  head=env.get("HPCTRAIN_HEAD", "localhost"),
                  spare_port=env.get("HPCTRAIN_SPARE_PORT", ""))
    for name, template in config.rank_env.items():
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

def resume_argv(argv: list[str], template: list[str], checkpoint: str) -> list[str]:
    """argv with the library's resume option (see libraries/base.py, resume_args)."""
    d = os.path.dirname(checkpoint)
    name, dirname = os.path.basename(checkpoint), os.path.basename(d)
    # *_re: for an option the library reads as a regular expression matched from the start of
    # a name (Isaac Lab's --load_run, --checkpoint): that name exactly, so that a run folder
    # whose name extends this one ("<time>_<run name>", a PBT copy's neighbour) never matches.
    values = {"checkpoint": checkpoint, "name": name, "dir": d, "dirname": dirname,
              "parent": os.path.dirname(d), "name_re": re.escape(name) + "$",
              "dirname_re": re.escape(dirname) + "$"}
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


def prepare_resume(config: RankConfig, run_dir: str, argv: list[str], me: RankIdentity) -> list[str]:
    os.environ["HPCTRAIN_CHECKPOINT_DIR"] = os.path.join(run_dir, "checkpoints")
    patterns = config.checkpoint_patterns
    checkpoint = find_checkpoint(run_dir, patterns) if patterns else None
    if checkpoint is None:
        os.environ.pop("HPCTRAIN_RESUME_FROM", None)
        return argv
    os.environ["HPCTRAIN_RESUME_FROM"] = checkpoint
    new = resume_argv(argv, config.resume_args, checkpoint)
    if me.rank == 0:
        print(f"hpctrain: resuming from {checkpoint} (job restart "
              f"{os.environ.get('SLURM_RESTART_COUNT', '0')}, torchrun restart "
              f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')})", file=sys.stderr)
    return new


def pin_device(me: RankIdentity) -> None:
    """cuda:LOCAL_RANK once torch is imported, with every GPU of the node left visible."""
    local = me.local_rank

    def pin(torch):
        if not torch.cuda.is_available():
            return
        count = torch.cuda.device_count()
        if local < count:
            torch.cuda.set_device(local)
        else:
            print(f"hpctrain: warning: rank {me.rank} has LOCAL_RANK {local} but only {count} "
                  "GPU(s) are visible (per-rank CUDA_VISIBLE_DEVICES?): using cuda:0",
                  file=sys.stderr)
            torch.cuda.set_device(0)
    after_import("torch", pin)


def prepare_device(config: RankConfig, me: RankIdentity) -> None:
    """CPU mode (the library's shims, gloo) or the GPU pin."""
    if cpu_mode_wanted(config.cpu_mode):
        os.environ["HPCTRAIN_CPU_MODE"] = "1"
        from . import cpu_shims
        armed = cpu_shims.install(config.cpu_shims)
        if armed and me.rank == 0:
            print("hpctrain: CPU mode: " + "; ".join(armed), file=sys.stderr)
    else:
        pin_device(me)


def arm_train_hooks(config: RankConfig, me: RankIdentity) -> None:
    if not config.train_hooks:
        return
    from ..during import train_hooks
    train_hooks.install(config.train_hooks)
    if me.rank == 0:
        print(f"hpctrain: train hooks: {', '.join(config.train_hooks)} (progress; save and stop "
              "at the next iteration after SIGTERM or the preemption signal)", file=sys.stderr)


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
    except stop.StopTraining:
        # A library hook stopped the training where no wrapper of the library's train call
        # could return normally: the checkpoint is written, the rest of the program is skipped.
        return 0
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    return 0


def close_process_group() -> None:
    """Destroy the gloo process group a finished program left open.

    DI-engine's DDPContext never destroys its group (its dist_finalize is a no-op: "usually hangs
    out"), and a gloo group still alive when the interpreter ends aborts it in about one run of
    five with torch 2.13 ("terminate called without an active exception", SIGABRT): a training
    that finished reads as a failed rank. Destroying it first costs nothing; measured here with
    torchrun alone, 2 of 10 runs aborted without it, 0 of 14 with it. Only after a normal end (a
    crashed rank's peers may be gone) and only for gloo: NCCL's destroy can block on a peer, and
    torch handles an NCCL group left open at exit itself."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not (dist.is_available() and dist.is_initialized()):
            return
        if "gloo" not in str(dist.get_backend()).lower():
            return
        dist.destroy_process_group()
    except Exception as exc:  # the program's end is recorded either way; say why, carry on
        print(f"hpctrain: could not close the process group at the end: {exc}", file=sys.stderr)


def record_failure(status_dir: str, me: RankIdentity, code: int, error: str) -> None:
    try:
        write_rank_failure(status_dir, RankFailure(
            rank=me.rank, node=me.node, exit_status=code, error=error,
            job_restart=int(os.environ.get("SLURM_RESTART_COUNT", 0)),
            torchrun_restart=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)),
            time=now("milliseconds")))
    except OSError:
        pass


def record_identity(status_dir: str, me: RankIdentity) -> None:
    """status/rank-R.json: which node and pid this rank is, so logs and status can find it."""
    import time
    me.pid, me.started = os.getpid(), time.time()
    try:
        write_identity(status_dir, me)
    except OSError:
        pass
    if me.rank == 0:  # the rendezvous is over (rank/phases.py)
        from .. import phases
        phases.mark("rank-0.json", {"rank_start": me.started})


def summarize(run_dir: str, reason: str, status: int, message: str = "") -> int:
    """Write status/failure.json — why the job ended without success — and print one line.

    Called by the batch shell (`RUN_DIR/rank summarize RUN_DIR REASON STATUS [MESSAGE]`) when
    the launch fails, the preflight fails, a hang ended the ranks, the job was cancelled, or a
    preempted job is not requeued. REASON: ranks | preflight | hang | preempted | cancelled.
    The nodes the failure blames (recovery.blamed_nodes) are recorded with it.
    """
    from ..end.recovery import blamed_nodes
    ranks = read_rank_failures(run_dir, tasks=False)
    nodes: list[str] = []
    previous = read_job_failure(run_dir)
    if reason == "hang" and previous is not None and previous.reason == "hang":
        # The watcher's record names the stuck ranks: keep it, with the launch's exit status,
        # and the culprit their stacks (dumped as they were ended) single out.
        from ..during.culprit import refine
        previous = refine(run_dir, previous)
        message = message or previous.message
        nodes, ranks_out = list(previous.nodes), list(previous.ranks)
    else:
        ranks_out = [r.to_dict() for r in ranks]
        nodes = blamed_nodes(run_dir, reason, ranks)
    if not message:
        first = first_failure(ranks)
        if first is not None:
            message = (f"rank {first.rank} on {first.node} failed (exit status "
                       f"{first.exit_status}): {first.error}")
            if len(ranks) > 1:
                message += f"; {len(ranks) - 1} more rank(s) failed, see ranks"
        else:
            message = (f"the launch exited with status {status} and no rank recorded an error "
                       "(killed by a signal, or torchrun/srun failed): see logs/")
    write_job_failure(run_dir, JobFailure(
        reason=reason, exit_status=status, message=message, ranks=ranks_out,
        job_id=os.environ.get("SLURM_JOB_ID"),
        job_restart=int(os.environ.get("SLURM_RESTART_COUNT", 0)),
        node=os.environ.get("SLURMD_NODENAME") or socket.gethostname(), time=now(),
        nodes=nodes))
    print(message)
    return 0


def main(config_path: str) -> int:
    # First of the rank's exit handlers, so it runs after every other one (they run in reverse).
    atexit.register(_leave_without_teardown, os.getpid())
    config = RankConfig.load(config_path)
    apply_site_env(config)
    me = identity(config)
    run_dir = os.environ.get("HPCTRAIN_RUN_DIR") or os.path.dirname(os.path.abspath(config_path))
    status_dir = os.path.join(run_dir, "status")
    os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
    tee_output(os.path.join(run_dir, "logs", f"rank-{me.rank}.log"), f"[rank {me.rank}] ")
    clear_rank_failure(status_dir, me.rank)  # an earlier attempt's: this attempt starts clean
    # A stop this rank's predecessor wrote when torchrun ended its group to restart it (rank 1
    # died on another node): this rank was not asked to stop, and the job must not end STOPPED.
    clear_stop_request(status_dir, me.rank)
    record_identity(status_dir, me)
    if config.launcher == "tasks" and "RANK" not in os.environ and me.local_rank == 0:
        # No per-node launch process to start the node's sampler: its first task does, as a
        # child that ends with it (torchrun's launch starts its own: rank/__main__.py).
        from ..during import sampler
        sampler.start(nnodes=sampler.tasks_nnodes())
    stop.install(config.preempt_signal, status_dir, me.rank)
    # The hang watcher sends SIGQUIT before it ends a stuck rank: the log then shows where
    # every thread of it was (the faulthandler writes without the GIL, from a blocked process).
    faulthandler.register(signal.SIGQUIT, all_threads=True, chain=False)
    # ... and asks for its flight recorder's dump first, when it is on (rank/during/flight.py).
    from ..during import flight
    flight.start(run_dir, me.rank)
    # `import hpctrain_progress` works in any program under the bootstrap, whatever interpreter
    # runs it and whether hpctrain is installed there (rank/progress.py).
    from .. import progress
    sys.modules.setdefault("hpctrain_progress", progress)
    error = ""
    try:
        set_environment(config, me)
        program = prepare_resume(config, run_dir, list(config.program), me)
        prepare_device(config, me)
        arm_train_hooks(config, me)
        if config.chdir_run_dir:
            # Programs that write under ./ (DI-engine's ./<exp_name>, Isaac Lab's ./logs) write
            # into the run; the program's own path still means what it did where it was submitted.
            if program and program[0].endswith(".py") and os.path.exists(program[0]):
                program[0] = os.path.abspath(program[0])
            os.chdir(run_dir)
        # Only where torchrun started the ranks (it sets MASTER_ADDR, the script the spare port):
        # a bootstrap run by hand or by a benchmark has no peers to meet.
        if config.rank_check_timeout and me.world_size > 1 and "MASTER_ADDR" in os.environ \
                and "HPCTRAIN_SPARE_PORT" in os.environ:
            from .preflight import rank_check
            spent = rank_check(me, float(config.rank_check_timeout))
            if me.rank == 0:
                print(f"hpctrain: preflight: all {me.world_size} ranks met in {spent:.2f} s "
                      "(rank check)", file=sys.stderr)
        code = run_program(program)
        if code == 0:
            close_process_group()
    except BaseException as exc:  # the program's own crash: show it, record it, exit non-zero
        traceback.print_exc()
        from ..end.causes import explain
        code, error = 1, explain(exc)
        if error != f"{type(exc).__name__}: {exc}":  # a known cause: its fix, below the traceback
            print(f"hpctrain: {error}", file=sys.stderr)
    if code != 0:
        record_failure(status_dir, me, code, error or f"exit status {code}")
    sys.stdout.flush()
    sys.stderr.flush()
    _finished.append(code)
    return code


_finished: list[int] = []  # the program's exit status, once main is over


def _leave_without_teardown(pid: int) -> None:
    """End a rank whose program finished, without the interpreter's last teardown.

    With torch 2.13 a rank that has finished still aborts now and then in that teardown
    ("terminate called without an active exception", SIGABRT, from a C++ thread left joinable),
    even with its process group destroyed: twice in the suite's last three full runs, once after
    a restart, once in the README's first example. torchrun then takes a finished rank for a
    failed one and restarts or fails the job. This is the rank's first exit handler, so the
    interpreter's own exit has already done everything it does for the program — waited for its
    threads, run every other exit handler (TensorBoard's and W&B's flushes, logging's) — when it
    runs: only the teardown of extension modules is left, and os._exit(0) skips it. A failed
    rank exits as Python does (its status is already recorded)."""
    if os.getpid() != pid or _finished != [0] or "torch" not in sys.modules:
        return  # a forked child, a failed program, or no torch to abort
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 (a closed stream: nothing left to write)
            pass
    os._exit(0)

"""How a run without a scheduler ends when it is signalled: torchrun's agent, the record of a
stop, and the ranks nothing else would end.

On Slurm the scheduler owns every process of a job and says why it ended. On this machine (the
local site) nothing does: the batch shell traps TERM, INT and HUP, forwards SIGTERM to torchrun
(which passes it on to the ranks: they save at the next iteration boundary, rank/stop.py), and
then says itself what happened (`stopped` below, status/stopped.json); whatever rank is left
when the launch is over is ended (`end_ranks`), so that no process of the run outlives it.

    agent TORCHRUN-ARGS...        torchrun's agent, as `python -m torch.distributed.run` runs it
                                  (run_agent; preflight.agent starts it after the health gate),
                                  except that a signal sent to it is an ending, not an error: one
                                  line and the exit status 128+N instead of SignalException's
                                  traceback, a second signal does not cut its shutdown short
                                  (the ranks are still saving; the first already reached them),
                                  and one in its exit barrier (its ranks have ended) is noted only
    stopped RUN_DIR SIG STATUS    the launch ended after SIG: write status/stopped.json (where
                                  the training stopped, what it saved, how to continue) and print
                                  it; exit 1 when a rank failed with an error of its own (then the
                                  run failed, and the batch shell records that instead)
    end-ranks RUN_DIR [GRACE]     SIGTERM to this node's ranks of the run that still live, SIGKILL
                                  after GRACE seconds (torchrun starts them in sessions of their
                                  own: a killed agent leaves them running)
"""
from __future__ import annotations

import glob
import os
import signal
import sys
import time

from .records import (RankConfig, RecordError, read_identities, read_json, read_rank_failures,
                      write_json)


def run_agent(main, torchrun_args: list[str]) -> int:
    """Run torchrun's `main` (its errors and exit status as they are) with its signal handler
    made patient: the first TERM/INT/HUP/QUIT ends the agent as torch does it (the workers get
    the signal and TORCH_ELASTIC_SHUTDOWN_TIMEOUT seconds to exit), the next ones are noted only.
    (The handler torch installs raises in the agent's main thread wherever it is, its shutdown's
    wait included: a second signal there would leave the ranks running, saving, without it.)

    A signal that finds the agent in its exit barrier (its ranks have all ended; it waits for the
    other nodes' agents) is noted only: there is nothing left to stop, the barrier's store wait
    does not return for a signal anyway, and raising there, in the middle of torch's log line
    about a peer gone first, printed the signal's traceback as a logging error (seen in CI). The
    batch shell makes the same choice (term_run)."""
    from torch.distributed.elastic.multiprocessing import api
    original = api._terminate_process_handler
    seen: list[int] = []

    def once(signum, frame):
        name = signal.Signals(signum).name
        if seen:
            print(f"hpctrain: torchrun: {name} again: still waiting for the ranks to save and exit",
                  file=sys.stderr, flush=True)
            return
        if _in_exit_barrier(frame):
            print(f"hpctrain: torchrun: {name}: its ranks have ended; it ends once the other "
                  "nodes' torchruns have (its exit barrier)", file=sys.stderr, flush=True)
            return
        seen.append(signum)
        original(signum, frame)

    api._terminate_process_handler = once
    try:
        main(torchrun_args)
    except api.SignalException as exc:
        sig = signal.Signals(exc.sigval)
        print(f"hpctrain: torchrun was sent {sig.name}: it passed it on to the ranks and they have "
              f"ended (exit status {128 + sig.value}; not an error of the training)",
              file=sys.stderr, flush=True)
        return 128 + sig.value
    return 0


def _in_exit_barrier(frame) -> bool:
    """Whether the agent's main thread (interrupted at FRAME) is inside torch's exit barrier."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_exit_barrier" and "elastic" in code.co_filename:
            return True
        frame = frame.f_back
    return False


# ----------------------------------------------------------------------------- stopped

def _stops(run_dir: str) -> list[dict]:
    out = []
    for path in glob.glob(os.path.join(run_dir, "status", "stopped-at-*.json")):
        try:
            data = read_json(path)
        except (OSError, RecordError):
            continue
        if isinstance(data, dict):
            out.append(data)
    return out


def _shown(run_dir: str, path: str) -> str:
    rel = os.path.relpath(path, run_dir)
    return path if rel.startswith("..") else rel


def _newest_checkpoint(run_dir: str) -> str | None:
    try:
        config = RankConfig.load(os.path.join(run_dir, "bootstrap.json"))
    except Exception:  # noqa: BLE001 (no bootstrap.json, or another version's: nothing to find)
        return None
    if not config.checkpoint_patterns:
        return None
    from .checkpoints import find_checkpoint
    return find_checkpoint(run_dir, config.checkpoint_patterns)


def _progress_step(run_dir: str) -> int | None:
    steps = []
    for path in glob.glob(os.path.join(run_dir, "status", "progress-*.json")):
        try:
            step = read_json(path).get("step")
        except (OSError, RecordError, AttributeError):
            continue
        if isinstance(step, int):
            steps.append(step)
    return max(steps) if steps else None


def stopped(run_dir: str, sig: str, status: int, started: float = 0.0) -> int:
    """The launch ended after SIG (this shell's, or the ranks' own): what was saved, where the
    training stopped, how to continue. Exit 1, writing nothing, when a rank failed with an error
    of its own, or a node failed its check (its health gate): that is a failure, not a stop —
    the signal the other ranks got was that failure's teardown."""
    if read_rank_failures(run_dir, tasks=False) or node_failed(run_dir):
        return 1
    sig = sig.removeprefix("SIG") or "TERM"
    stops = _stops(run_dir)
    step = max((s["step"] for s in stops if isinstance(s.get("step"), int)), default=None)
    saved = next((s["saved"] for s in stops if isinstance(s.get("saved"), str)), None)
    where = f" at iteration {step}" if step is not None else ""
    if saved is None:
        newest = _newest_checkpoint(run_dir)
        if newest is not None:
            try:
                fresh = os.stat(newest).st_mtime >= started
            except OSError:
                fresh = False
            saved = newest if fresh else None
            if not fresh:
                what = f"nothing new was saved (the newest checkpoint, {_shown(run_dir, newest)}, is older)"
        else:
            what = "nothing was saved (the program has no checkpoint hpctrain knows of)"
        if step is None:
            step = _progress_step(run_dir)
            where = f" near iteration {step}" if step is not None else ""
    if saved is not None:
        what = f"saved {_shown(run_dir, saved)}"
    message = f"(SIG{sig}){where}, {what}; continue with: hpctrain submit --resume {run_dir}"
    write_json(os.path.join(run_dir, "status", "stopped.json"),
               {"signal": sig, "step": step, "saved": saved, "exit_status": status,
                "message": message, "time": time.time()}, root=run_dir)
    print(f"STOPPED {message}")
    return 0


FAILED_NOTES = "preflight-failed-*.txt"  # rank/preflight.py's notes (FAILED_PREFIX) of a failed check


def node_failed(run_dir: str) -> bool:
    """Whether a node of this attempt failed its check (status/preflight-failed-NODE.txt, which
    the batch shell clears at each launch)."""
    return bool(glob.glob(os.path.join(glob.escape(run_dir), "status", FAILED_NOTES)))


# ----------------------------------------------------------------------------- leftover ranks

def _rank_of_run(pid: int, run_dir: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read().split(b"\0")
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X") and f"HPCTRAIN_RUN_DIR={run_dir}".encode() in environ


def end_ranks(run_dir: str, grace: float = 10.0) -> int:
    """SIGTERM to every rank of this run on this node that still lives (by its identity record
    and its environment: never a process that merely reused the pid), SIGKILL after `grace`."""
    me = os.environ.get("SLURMD_NODENAME")
    pids = [i.pid for i in read_identities(run_dir)
            if i.pid and (me is None or i.node == me) and _rank_of_run(i.pid, run_dir)]
    if not pids:
        return 0
    print(f"hpctrain: {len(pids)} rank process(es) outlived the launch "
          f"({', '.join(map(str, pids))}): ending them", file=sys.stderr, flush=True)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        signal_ranks(pids, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_rank_of_run(p, run_dir) for p in pids):
            time.sleep(0.1)
        pids = [p for p in pids if _rank_of_run(p, run_dir)]
        if not pids:
            break
    return 0


def signal_ranks(pids: list[int], sig: int) -> None:
    """SIG to each rank and its process group: a rank leads its own session, so this takes its
    tee and its workers too."""
    for pid in pids:
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

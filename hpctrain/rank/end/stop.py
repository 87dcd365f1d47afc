"""Stop on signal: in every rank, SIGTERM and the job's preemption signal mean "save now".

Slurm preempts with SIGTERM (unless the site sets preempt_send_user_signal), ahead of the time
limit it sends the job's own signal (`--signal=B:USR2@…`, forwarded by the batch shell), and a
user's `scancel` is SIGTERM too. The bootstrap installs one handler for both (install()), before
the program runs:

- It only sets a flag and writes status/stop-R.json (records.StopRequest): the batch shell reads
  those to learn that the ranks were signalled even when it was not (a real preemption signals
  the job step's tasks, not the batch shell). Slurm's view of the job then decides whether to
  requeue (templates/slurm/requeue.sh.j2).
- The library hooks (train_hooks.py) read the flag at the next iteration boundary. Every rank
  gets the signal at a slightly different moment, so they first agree (agree_torch/agree_jax: a
  MAX all-reduce of the flag, at every boundary): all ranks stop at the same iteration, the
  rank that saves normally saves through the library's own save, all meet once more (nobody
  leaves while it writes), and the library's training call returns as if it had reached its
  end (StopTraining, caught by the hook's wrapper of that call) — the script then closes its
  environments and exits 0.
- A program without library hooks (library: command) keeps its own ways: if it handles the
  preemption signal itself, SIGTERM is handed to that handler too (one "save now" path); if it
  handles nothing, SIGTERM ends it as it always did.

torchrun's agent also handles SIGTERM: it passes SIGTERM on to the ranks (the handler above
takes it) and waits TORCH_ELASTIC_SHUTDOWN_TIMEOUT seconds before SIGKILL — the plan sets that to
preemption.grace, so a rank that is saving is not killed at torch's default 30 s.
"""
from __future__ import annotations

import os
import signal
import sys
import time

from ..records import StopRequest, write_stop_request


class StopTraining(BaseException):
    """Leaves a library's training loop at an iteration boundary all ranks agreed on.

    A BaseException, so that the training code's own `except Exception` does not swallow it.
    The hook's wrapper around the library's train call catches it and returns normally; the
    bootstrap catches what no wrapper did and exits 0."""


_state: dict = {"signal": None, "preempt": None, "status_dir": None, "rank": 0, "hooked": False,
                "announced": False}


def requested() -> str | None:
    """The name of the signal that asked this rank to stop (TERM, USR2, ...), or None."""
    return _state["signal"]


def hooked() -> None:
    """A library hook now reads the flag at every iteration boundary (train_hooks.py)."""
    _state["hooked"] = True


def _on_signal(signum, frame) -> None:
    name = signal.Signals(signum).name.removeprefix("SIG")
    first = _state["signal"] is None
    if first:
        _state["signal"] = name
        status_dir = _state["status_dir"]
        if status_dir:
            try:
                write_stop_request(status_dir, StopRequest(
                    rank=_state["rank"], signal=name, time=time.time(),
                    job_id=os.environ.get("HPCTRAIN_JOB_ID"),
                    job_restart=int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)))
            except OSError:
                pass
    if _state["hooked"]:
        return  # the library hook stops at the next iteration boundary
    preempt = _state["preempt"]
    own = signal.getsignal(preempt) if preempt is not None else None
    if signum != preempt and callable(own) and own is not _on_signal:
        own(preempt, frame)  # the program's own "save now" handler: SIGTERM means the same
    elif signum == signal.SIGTERM:
        # A program that saves nothing on a signal ends on SIGTERM, as it would without hpctrain.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def install(preempt_signal: str | None, status_dir: str, rank: int) -> list[str]:
    """Handle SIGTERM and the job's preemption signal in this rank; returns their names."""
    _state.update(status_dir=status_dir, rank=rank)
    names = ["TERM"]
    if preempt_signal and preempt_signal != "TERM":
        names.append(preempt_signal)
        _state["preempt"] = getattr(signal, "SIG" + preempt_signal)
    for name in names:
        signal.signal(getattr(signal, "SIG" + name), _on_signal)
    return names


def reclaim() -> None:
    """Take SIGTERM (and the preemption signal) back after a library took them: JAX's
    jax.distributed.initialize() installs a SIGTERM handler of its own (its preemption
    notifier), which swallows the signal without stopping anything."""
    names = ["TERM"] + ([signal.Signals(_state["preempt"]).name.removeprefix("SIG")]
                        if _state["preempt"] is not None else [])
    for name in names:
        try:
            signal.signal(getattr(signal, "SIG" + name), _on_signal)
        except ValueError:  # not the main thread: the library imported in a thread
            pass


def stopped_at(step: int, path: str | None) -> None:
    """Where the training stopped and what it saved (status/stopped-at-R.json): the batch shell's
    `rank stopped` reads it to say "STOPPED (SIGTERM) at iteration 25, saved ..." (bootstrap.py)."""
    status_dir = _state["status_dir"]
    if not status_dir:
        return
    from ..records import write_json
    try:
        write_json(os.path.join(status_dir, f"stopped-at-{_state['rank']}.json"),
                   {"rank": _state["rank"], "step": int(step), "signal": _state["signal"],
                    "saved": os.path.abspath(path) if path else None, "time": time.time()},
                   indent=None, root=os.path.dirname(status_dir))
    except (OSError, TypeError, ValueError):
        pass


def announce(text: str) -> None:
    """One line in the rank's log (rank 0 speaks for all, the others stay quiet)."""
    if _state["rank"] == 0 or os.environ.get("HPCTRAIN_RANK", "0") == "0":
        print(f"hpctrain: stop: {text}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- agreement

def agree_torch(flag: bool) -> bool:
    """Whether any rank of torch's default process group wants to stop (MAX all-reduce).
    Alone (no process group, or a world of one) it is this rank's own flag."""
    import torch
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    device = torch.device("cpu")
    if "nccl" in str(dist.get_backend()).lower():  # NCCL reduces CUDA tensors only
        device = torch.device("cuda", torch.cuda.current_device())
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def barrier_torch() -> None:
    """Every rank waits here until the saving rank has written its checkpoint."""
    agree_torch(False)


def agree_jax(flag: bool) -> bool:
    """The same for a JAX job: any process's flag, through jax's multi-host utilities."""
    import jax
    if jax.process_count() == 1:
        return flag
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
    flags = multihost_utils.process_allgather(jnp.array([1 if flag else 0], dtype=jnp.int32))
    return bool(int(jnp.max(jnp.asarray(flags))) > 0)


def barrier_jax() -> None:
    agree_jax(False)

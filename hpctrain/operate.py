"""Operating a submitted run: the calls behind `status`, `logs`, `cancel`, `list`, `submit --wait`.

A run is named by its run id (or its end), its directory, or its Slurm job id (1234 or 1234_5),
from any directory. The same functions serve the CLI and the Python API.
"""
from __future__ import annotations

from .backends import backend_of
from .logs import follow, read
from .runs import Run, find
from .status import RunStatus, gather, recent, wait


def resolve(ref: str | Run) -> Run:
    return ref if isinstance(ref, Run) else find(str(ref))


def split_task(ref: str) -> int | None:
    """'1234_5' names task 5 of array 1234."""
    head, sep, tail = str(ref).partition("_")
    return int(tail) if sep and head.isdigit() and tail.isdigit() else None


def status(ref: str | Run) -> RunStatus:
    return gather(resolve(ref))


def cancel(ref: str | Run) -> RunStatus:
    """Cancel the run (every task of an array) and record it in run.json."""
    run = resolve(ref)
    st = gather(run)
    if st.state.done:
        return st
    backend_of(run.record).cancel(run)
    run.update(cancelled=run.record.get("cancelled") or True)
    return gather(run)


def logs(ref: str | Run, *, follow_output: bool = False, rank: int | None = None,
         node: str | None = None, task: int | None = None, write=None, poll: float = 0.5) -> None:
    import sys
    run = resolve(ref)
    if task is None and isinstance(ref, str):
        task = split_task(ref)
    which = dict(rank=rank, node=node, task=task)
    write = write or sys.stdout.write
    if not follow_output:
        read(run, write=write, **which)
        return
    follow(run, done=lambda: gather(run).state.done, write=write, poll=poll, **which)


def exit_status(st: RunStatus) -> int:
    """What `submit --wait` exits with: the job's own exit status; 1 when it failed without one."""
    s = st.state
    if s.state == "COMPLETED":
        return 0
    return s.exit_code if s.exit_code else 1


__all__ = ["status", "cancel", "logs", "wait", "recent", "exit_status", "resolve"]

"""Operating a submitted run: the calls behind `status`, `logs`, `cancel`, `submit --wait`, and
behind the Python Handle's methods of the same names — one path for both.

A run is named by its run id (or its end), its directory, or its job id (1234 or 1234_5), from
any directory.
"""
from __future__ import annotations

from ..backends import for_run
from .logs import follow, read
from ..runs.records import Run, find
from .status import RunStatus, gather, wait, with_evaluations


def resolve(ref: str | Run) -> Run:
    return ref if isinstance(ref, Run) else find(str(ref))


def split_task(ref: str) -> int | None:
    """'1234_5' names task 5 of array 1234."""
    head, sep, tail = str(ref).partition("_")
    return int(tail) if sep and head.isdigit() and tail.isdigit() else None


def status(ref: str | Run) -> RunStatus:
    """One run's status, with its evaluation records (`hpctrain status RUN`)."""
    return with_evaluations(gather(resolve(ref)))


def cancel(ref: str | Run) -> RunStatus:
    """Cancel the run (every task of an array) and record when."""
    run = resolve(ref)
    st = gather(run)
    if st.state.done:
        return st
    for_run(run).cancel(run)
    if not run.record.cancelled:
        import time
        run.update(cancelled=time.time())
    return gather(run)


def logs(ref: str | Run, *, follow_output: bool = False, rank: int | None = None,
         node: str | None = None, task: int | None = None, write=None, poll: float = 0.5,
         trial: int | None = None) -> None:
    """trial: a study's trial (trials/NNNN), its ranks' logs."""
    import sys
    run = resolve(ref)
    if task is None and trial is None and isinstance(ref, str):
        task = split_task(ref)
    which = dict(rank=rank, node=node, task=task, trial=trial)
    write = write or sys.stdout.write
    try:
        chosen = for_run(run)
    except KeyError:
        chosen = None  # an unknown backend in run.json: its files, if any, are read as they are
    if chosen is not None:
        chosen.fetch(run)  # where the nodes (or the cluster) keep the files
    if not follow_output:
        read(run, write=write, **which)
        return
    follow(run, done=lambda: gather(run).state.done, write=write, poll=poll,
           refresh=(lambda: chosen.refresh(run)) if chosen is not None else None, **which)


__all__ = ["status", "cancel", "logs", "wait", "resolve"]

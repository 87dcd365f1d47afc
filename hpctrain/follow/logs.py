"""A run's output: the whole job's log, one rank's, or one node's ranks'; printed or followed.

    the job's own output        where its backend puts it (Slurm: logs/slurm-<jobid>.out, one per
                                array task; this machine: logs/job.out, tasks/<i>/logs/job.out):
                                the batch script and every rank, "[rank R] "-prefixed
    logs/rank-R.log             rank R alone (the bootstrap's tee); status/rank-R.json says its node
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

from ..backends import for_run
from ..errors import HpctrainError
from ..rank.records import read_identities
from ..runs.records import Run, trial_dir


def _task_dir(run: Run, task: int | None, trial: int | None = None) -> Path:
    if trial is not None:  # a study's trial
        d = trial_dir(run.path, trial)
        if trial < 0 or not d.is_dir():
            raise HpctrainError(f"study {run.id} has no trial {trial} (no {d})",
                                fix=f"its trials: hpctrain status {run.id}")
        return d
    if task is None:
        return run.path
    size = run.record.array_size
    if not size or not 0 <= task < size:
        raise HpctrainError(f"run {run.id} has no task {task}",
                            fix=f"tasks are 0..{size - 1}" if size else "this run is not a sweep")
    return run.path / "tasks" / str(task)


def sources(run: Run, *, rank: int | None = None, node: str | None = None,
            task: int | None = None, trial: int | None = None) -> list[tuple[str, Path]]:
    """(label, path) of the files to show, in order. Files that do not exist yet are listed
    where their names are known (a rank's log), so following can wait for them. A study's
    trial: its own script's output (logs/job.out), else its ranks' logs."""
    d = _task_dir(run, task, trial)
    if rank is not None:
        return [(f"rank {rank}", d / "logs" / f"rank-{rank}.log")]
    if node is not None:
        return [(f"rank {ident.rank}", d / "logs" / f"rank-{ident.rank}.log")
                for ident in read_identities(str(d)) if ident.node == node]
    if trial is not None:  # the trial script's own output (every rank's, prefixed), else each rank's
        if (d / "logs" / "job.out").exists():
            return [("job.out", d / "logs" / "job.out")]
        return [(f"rank {r}", d / "logs" / f"rank-{r}.log") for r in _logged_ranks(d)]
    return [(f.name if f.parent.parent == run.path else f"task {f.parent.parent.name}: {f.name}", f)
            for f in for_run(run).output_files(run, task)]


def _logged_ranks(d: Path, limit: int = 100_000) -> list[int]:
    """The ranks that have a log in d/logs, in rank order."""
    import re
    try:
        names = sorted(os.listdir(d / "logs"))[:limit]
    except OSError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := re.fullmatch(r"rank-([0-9]{1,9})\.log", n)))


def check_choice(run: Run, *, rank: int | None = None, node: str | None = None,
                 task: int | None = None, trial: int | None = None) -> None:
    """A rank or node this run does not have is an error that lists the ones it has (once the
    ranks have started; before that, the rank's log is waited for)."""
    d = _task_dir(run, task, trial)
    idents = read_identities(str(d))
    if rank is not None:
        ranks = sorted(i.rank for i in idents)
        rec = run.record
        world = rec.nodes * rec.procs_per_node
        if rank < 0 or (world and rank >= world) or (ranks and rank not in ranks and not
                                                       (d / "logs" / f"rank-{rank}.log").exists()):
            raise HpctrainError(f"run {run.id} has no rank {rank}",
                                fix=f"its ranks are 0..{world - 1}" if world else
                                "give one of " + ", ".join(map(str, ranks)))
    if node is not None and not any(i.node == node for i in idents):
        known = sorted({i.node for i in idents})
        raise HpctrainError(f"no rank of run {run.id} ran on node '{node}'",
                            fix=("nodes of this run: " + ", ".join(known)) if known
                            else "no rank has started yet; try again when the job runs")


def read(run: Run, write: Callable[[str], None] = sys.stdout.write, **which) -> None:
    check_choice(run, **which)
    srcs = sources(run, **which)
    many = len(srcs) > 1
    for label, path in srcs:
        if many:
            write(f"==> {label} <==\n")
        try:
            with _open(path) as f:
                while chunk := f.read(1 << 20):  # a log of any size, a piece at a time
                    write(chunk.decode(errors="replace"))
        except FileNotFoundError:
            pass


def _open(path: Path):
    """A log file, if it is a regular one: a named pipe or a device in a run directory (shared,
    untrusted) must not hang `logs`."""
    from ..runs.untrusted import Unreadable, open_regular
    try:
        return open_regular(path)
    except Unreadable as exc:
        raise HpctrainError(f"cannot show the log: {exc.strerror}",
                            fix="remove it from the run directory: hpctrain writes logs there "
                            "as regular files") from None
    except FileNotFoundError:
        raise
    except OSError as exc:  # unreadable, or a socket (ENXIO)
        raise HpctrainError(f"cannot read the log {path}: {exc.strerror}",
                            fix="make it readable (ask whoever owns the run), or remove it if "
                            "it is not a log file") from None


def follow(run: Run, done: Callable[[], bool], write: Callable[[str], None] = sys.stdout.write,
           poll: float = 0.5, refresh: Callable[[], str | None] | None = None,
           note: Callable[[str], None] | None = None, **which) -> None:
    """Print the output as it grows until done() is true, then print what is left and return.
    Files are read every `poll` seconds; done() (which may ask the scheduler) every 10 s.
    refresh(): brings the files here first (a run on a cluster), returning a note to show
    (a lost connection, a reconnection) or None; notes go to note() (stderr by default)."""
    note = note or (lambda text: print(text, file=sys.stderr, flush=True))
    if which.get("node") is None:
        check_choice(run, **which)
    offsets: dict[Path, int] = {}
    current: Path | None = None
    finished = False
    asked = 0.0
    while True:
        if time.monotonic() - asked >= 10 or not asked:
            finished = finished or done()
            asked = time.monotonic()
        if refresh is not None:
            said = refresh()
            if said:
                note(said)
        srcs = sources(run, **which)  # rescan: ranks and tasks appear while the job runs
        many = len(srcs) > 1 or which.get("node") is not None
        for label, path in srcs:
            for chunk in _new_text(path, offsets, whole=finished):
                if many and current != path:
                    write(f"==> {label} <==\n")
                    current = path
                write(chunk)
        if finished:
            return
        time.sleep(poll)


def _new_text(path: Path, offsets: dict[Path, int], whole: bool = False) -> Iterator[str]:
    step = 16 << 20  # read a piece at a time: a log may be larger than memory
    try:
        with _open(path) as f:
            while True:
                f.seek(offsets.get(path, 0))
                data = f.read(step)
                # Only whole lines while following, so a rank's line is never split by another's
                # header (a piece with no line end at all is shown as it is).
                cut = len(data) if whole or len(data) == step else data.rfind(b"\n") + 1
                if cut:
                    offsets[path] = offsets.get(path, 0) + cut
                    yield data[:cut].decode(errors="replace")
                if len(data) < step:
                    return
    except FileNotFoundError:
        return

"""A run's output: the whole job's log, one rank's, or one node's ranks'; printed or followed.

    logs/slurm-<jobid>.out      the batch script and every rank, "[rank R] "-prefixed (Slurm)
    logs/slurm-<job>_<task>.out one per array task
    logs/job.out                the same for the local backend; tasks/<i>/logs/job.out per task
    logs/rank-R.log             rank R alone (the bootstrap's tee); status/rank-R.json says its node
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

from .errors import HpctrainError
from .runs import Run, rank_identity_files


def _task_dir(run: Run, task: int | None) -> Path:
    if task is None:
        return run.path
    d = run.path / "tasks" / str(task)
    if not d.is_dir():
        size = run.record.get("array_size")
        raise HpctrainError(f"run {run.id} has no task {task}",
                            fix=f"tasks are 0..{size - 1}" if size else "this run is not a sweep")
    return d


def sources(run: Run, *, rank: int | None = None, node: str | None = None,
            task: int | None = None) -> list[tuple[str, Path]]:
    """(label, path) of the files to show, in order. Files that do not exist yet are listed
    where their names are known (a rank's log), so following can wait for them."""
    d = _task_dir(run, task)
    if rank is not None:
        return [(f"rank {rank}", d / "logs" / f"rank-{rank}.log")]
    if node is not None:
        out = []
        for path in rank_identity_files(d):
            try:
                ident = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if ident.get("node") == node:
                out.append((f"rank {ident['rank']}", d / "logs" / f"rank-{ident['rank']}.log"))
        return sorted(out, key=lambda s: int(s[0].split()[1]))
    if run.record.get("array_size") and task is None:
        files = sorted(d.glob("logs/slurm-*.out")) or sorted(d.glob("tasks/*/logs/job.out"))
        return [(f.name, f) for f in sorted(files, key=_task_key)]
    # An array task's batch output lies in the array's logs/ (Slurm names it), not in tasks/<i>/.
    pattern = f"logs/slurm-*_{task}.out" if task is not None else "logs/slurm-*.out"
    files = sorted(run.path.glob(pattern), key=lambda f: f.stat().st_mtime)
    if (d / "logs" / "job.out").exists():
        files.append(d / "logs" / "job.out")
    return [(f.name, f) for f in files]


def _task_key(path: Path) -> tuple:
    digits = path.stem.rsplit("_", 1)[-1] if path.name.startswith("slurm-") else path.parent.parent.name
    return (int(digits) if digits.isdigit() else 0, str(path))


def node_names(run: Run, task: int | None = None) -> list[str]:
    d = _task_dir(run, task)
    names = set()
    for path in rank_identity_files(d):
        try:
            names.add(json.loads(path.read_text())["node"])
        except (OSError, ValueError, KeyError):
            continue
    return sorted(names)


def read(run: Run, write: Callable[[str], None] = sys.stdout.write, **which) -> None:
    srcs = sources(run, **which)
    _check_found(run, srcs, which)
    many = len(srcs) > 1
    for label, path in srcs:
        if many:
            write(f"==> {label} <==\n")
        try:
            write(path.read_text(errors="replace"))
        except FileNotFoundError:
            pass


def _check_found(run: Run, srcs, which) -> None:
    if which.get("node") is not None and not srcs:
        known = node_names(run, which.get("task"))
        raise HpctrainError(f"no rank of run {run.id} ran on node '{which['node']}'",
                            fix=("nodes of this run: " + ", ".join(known)) if known
                            else "no rank has started yet; try again when the job runs")


def follow(run: Run, done: Callable[[], bool], write: Callable[[str], None] = sys.stdout.write,
           poll: float = 0.5, **which) -> None:
    """Print the output as it grows until done() is true, then print what is left and return."""
    offsets: dict[Path, int] = {}
    current: Path | None = None
    finished = False
    while True:
        finished = finished or done()
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
    try:
        with open(path, "rb") as f:
            f.seek(offsets.get(path, 0))
            data = f.read()
    except FileNotFoundError:
        return
    # Only whole lines while following, so a rank's line is never split by another's header.
    cut = len(data) if whole else data.rfind(b"\n") + 1
    if cut:
        offsets[path] = offsets.get(path, 0) + cut
        yield data[:cut].decode(errors="replace")

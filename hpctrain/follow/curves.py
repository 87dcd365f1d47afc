"""A run's scalar curves, from the TensorBoard event files its training wrote, stitched across
restarts and requeues onto one step axis.

Every supported library writes TensorBoard event files into the run directory (rl-games under
its train_dir's summaries/, rsl-rl and skrl into their log directory, DI-engine under
./<exp_name>/log/, Isaac Lab's train.py under ./logs/<library>/; a plain program where it likes,
best under $HPCTRAIN_RUN_DIR). They are found by walking the run directory (each sweep task's
own for a sweep) and read with TensorBoard's own reader (EventFileLoader), never parsed here.

Each event file is one writer's session. Sessions that overlap in time are one attempt (several
ranks writing at once); a session that starts after the previous ones ended is a new attempt:
torchrun restarted the ranks, or Slurm requeued the job. Stitching, per metric:

- an attempt whose first step lies after the previous attempt's first step resumed from a
  checkpoint: its points replace the previous attempts' points from that step on (those were
  computed after the checkpoint and lost with the preemption, as TensorBoard itself purges them);
- an attempt whose first step is at or before the previous attempt's first step counts anew
  (a library that restarts its counter on resume, or a restart without a checkpoint): its steps
  are shifted to continue where the curve so far ends.

The result has strictly increasing steps and the stitched step at which each attempt began.
Imports tensorboard (the `watch` extra) only when event files are read.
"""
from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field

from ..errors import HpctrainError

EVENT_PREFIX = "events.out.tfevents."
# Folders of a run directory that never hold a training's event files.
_SKIP = {"rank", "status", "__pycache__"}


@dataclass
class Session:
    """One event file: its scalars as tag -> [(step, wall time, value)], and its time span."""
    path: str
    start: float
    end: float
    scalars: dict[str, list[tuple[int, float, float]]]


@dataclass
class Curve:
    """One metric of one run (or sweep task), stitched: steps strictly increase."""
    tag: str
    task: int | None
    steps: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    attempt_starts: list[int] = field(default_factory=list)  # stitched step where each began
    files: list[str] = field(default_factory=list)

    @property
    def attempts(self) -> int:
        return len(self.attempt_starts)

    def to_json(self) -> dict:
        return {"tag": self.tag, "task": self.task, "steps": self.steps, "values": self.values,
                "attempt_starts": self.attempt_starts, "files": self.files}


def event_files(directory: str, skip_tasks: bool = False) -> list[str]:
    """Every TensorBoard event file under `directory` (not under tasks/ when skip_tasks: those
    are the sweep tasks' own), sorted by path."""
    out = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP
                         and not (skip_tasks and root == directory and d == "tasks"))
        # Regular files only: a FIFO of that name would block the reader for ever.
        out += [p for f in files if f.startswith(EVENT_PREFIX)
                and os.path.isfile(p := os.path.join(root, f))]
    return sorted(out)


def _loader():
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util import tensor_util
    except ImportError:
        raise HpctrainError("reading TensorBoard event files needs the tensorboard package",
                            fix="pip install 'hpctrain[watch]' (tensorboard and matplotlib)") from None
    return EventFileLoader, tensor_util


def read_session(path: str) -> Session | None:
    """One event file's scalars (TensorBoard's own reader; a truncated last record, as a
    writer killed mid-write leaves, ends the file). None when it holds no scalar."""
    EventFileLoader, tensor_util = _loader()
    scalars: dict[str, list[tuple[int, float, float]]] = {}
    start = end = None
    try:
        for event in EventFileLoader(path).Load():
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name != "scalars":
                    continue
                try:
                    number = float(tensor_util.make_ndarray(value.tensor).item())
                except (ValueError, TypeError):
                    continue
                scalars.setdefault(value.tag, []).append((int(event.step), event.wall_time, number))
                # The span of what it logged (not of the file's header): when the attempt trained.
                start = event.wall_time if start is None else min(start, event.wall_time)
                end = event.wall_time if end is None else max(end, event.wall_time)
    except OSError as exc:
        raise HpctrainError(f"cannot read the event file {path}: {exc}") from None
    except (MemoryError, OverflowError):
        # A record whose header claims more bytes than memory holds: TensorBoard's reader asks
        # for them all at once. The file is damaged (or made to look so), not a training log.
        raise HpctrainError(f"the event file {path} is damaged: a record claims more bytes than "
                            "the file or this machine's memory holds",
                            fix="move the file out of the run directory") from None
    if not scalars or start is None:
        return None
    return Session(path=path, start=start, end=end, scalars=scalars)


def attempts(sessions: list[Session]) -> list[list[Session]]:
    """Sessions grouped into attempts: overlapping in time = one attempt, in time order."""
    groups: list[list[Session]] = []
    end = None
    for s in sorted(sessions, key=lambda s: (s.start, s.path)):
        if groups and end is not None and s.start <= end:
            groups[-1].append(s)
            end = max(end, s.end)
        else:
            groups.append([s])
            end = s.end
    return groups


def stitch(tag: str, groups: list[list[Session]], task: int | None = None) -> Curve:
    """One metric across attempts on one step axis (see the module's docstring)."""
    curve = Curve(tag=tag, task=task)
    points: list[tuple[int, float]] = []  # (stitched step, value)
    offset = 0
    previous_first = None
    previous_spacing = 1
    for group in groups:
        merged: dict[int, tuple[float, float]] = {}
        for session in group:
            for step, wall, value in session.scalars.get(tag, ()):
                if step not in merged or wall >= merged[step][0]:
                    merged[step] = (wall, value)
        if not merged:
            continue
        steps = sorted(merged)
        first = steps[0]
        if points and previous_first is not None and first <= previous_first:
            offset = points[-1][0] + previous_spacing - first  # counts anew: continue the axis
        else:
            points = [p for p in points if p[0] < first + offset]  # resumed: supersede
        curve.attempt_starts.append(first + offset)
        points += [(step + offset, merged[step][1]) for step in steps]
        previous_first = first
        if len(steps) > 1:
            previous_spacing = max(1, steps[-1] - steps[-2])
        curve.files += [s.path for s in group if tag in s.scalars]
    curve.steps = [p[0] for p in points]
    curve.values = [p[1] for p in points]
    return curve


@dataclass
class Scalars:
    """What one run (or sweep task) logged: its attempts' sessions, and the tags in them."""
    task: int | None
    groups: list[list[Session]]

    @property
    def tags(self) -> list[str]:
        return sorted({t for g in self.groups for s in g for t in s.scalars})

    def curve(self, tag: str) -> Curve:
        return stitch(tag, self.groups, self.task)


def read_run(run_dir: str, array_size: int | None = None) -> list[Scalars]:
    """The run's scalars, or each sweep task's (those with event files), by task."""
    where = ([(None, run_dir, False)] if not array_size else
             [(i, os.path.join(run_dir, "tasks", str(i)), False) for i in range(array_size)])
    out = []
    for task, directory, skip in where:
        sessions = [s for s in map(read_session, event_files(directory, skip_tasks=skip)) if s]
        if sessions:
            out.append(Scalars(task=task, groups=attempts(sessions)))
    return out


def choose(tags: list[str], wanted: list[str], main: tuple[str, ...] = (),
           limit: int = 12) -> list[str]:
    """The tags to show: those named (exactly, as a glob, or as a case-insensitive part of the
    name), or by default the library's main metrics first and then the rest, at most `limit`."""
    if not wanted:
        first = [t for t in main if t in tags]
        return (first + [t for t in tags if t not in first])[:limit]
    out: list[str] = []
    for name in wanted:
        hits = ([name] if name in tags else fnmatch.filter(tags, name)
                or [t for t in tags if name.lower() in t.lower()])
        if not hits:
            shown = ", ".join(tags[:30]) + (f" … ({len(tags)} in all)" if len(tags) > 30 else "")
            raise HpctrainError(f"no metric '{name}' in the run's event files",
                                fix=f"choose from: {shown}")
        out += [h for h in hits if h not in out]
    return out

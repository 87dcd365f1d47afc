"""A run's checkpoints and its evaluation records, read back as untrusted data.

Checkpoints are found with the patterns the library's adapter gives for resuming (the bootstrap
takes the newest of the same matches: rank/end/checkpoints.py), listed without following a link
out of the run and bounded in number. Evaluation records (RUN_DIR/eval/*.json, written on the
node by rank/after/evaluate.py) are regular files of a bounded size, their values checked one by
one: a damaged record is reported by name and never hides the others.
"""
from __future__ import annotations

import glob
import math
import os
import re
import stat
from pathlib import Path

import msgspec

from ..errors import HpctrainError
from ..rank.after.evaluate import EVAL_DIR, record_name
from ..rank.end.checkpoints import being_written
from .untrusted import Unreadable, json_record, read_regular

MAX_CHECKPOINTS = 10_000  # checkpoints one run may list
MAX_EVALS = 10_000  # evaluation records read from one run
MAX_EVAL_BYTES = 16 << 10  # one record (rank/after/evaluate.py writes ~600 bytes): 160 MB in all
_ITERATION = re.compile(r"(\d+)")


class Checkpoint(msgspec.Struct, frozen=True):
    path: str  # relative to the run directory
    iteration: int | None  # the last number in its file name (model_50.pt: 50)
    mtime: float


class Evaluation(msgspec.Struct, frozen=True, kw_only=True):
    checkpoint: str
    iteration: int | None
    status: str  # ok | failed
    mean_return: float | None
    episode_length: float | None
    success_rate: float | None
    episodes: int | None
    method: str
    seed: int | None
    evaluated: str
    eval_run: str
    error: str | None = None


def iteration_of(name: str) -> int | None:
    numbers = _ITERATION.findall(os.path.splitext(name)[0])
    return int(numbers[-1]) if numbers else None


def checkpoints(run_dir: Path, patterns: list[str]) -> list[Checkpoint]:
    """Every checkpoint of the run, oldest iteration first (then oldest file): regular files
    inside the run directory only, none being written, at most MAX_CHECKPOINTS."""
    root = os.path.realpath(run_dir)
    found: dict[str, Checkpoint] = {}
    for pattern in patterns:
        if os.path.isabs(pattern):
            continue  # a checkpoint of the run lies in the run
        for path in glob.iglob(os.path.join(glob.escape(str(run_dir)), pattern), recursive=True):
            rel = os.path.relpath(path, run_dir)
            real = os.path.realpath(path)
            if being_written(os.path.basename(path)) or rel in found \
                    or not real.startswith(root + os.sep):
                continue
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
                continue
            if len(found) >= MAX_CHECKPOINTS:
                raise HpctrainError(f"{run_dir}: more than {MAX_CHECKPOINTS} checkpoints match "
                                    f"{', '.join(patterns)}",
                                    fix="remove old checkpoints, or evaluate one: --checkpoint N")
            found[rel] = Checkpoint(rel, iteration_of(os.path.basename(rel)), st.st_mtime)
    return sorted(found.values(), key=lambda c: (c.iteration is None, c.iteration or 0, c.mtime,
                                                 c.path))


def _float(value, lo=-math.inf, hi=math.inf):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not lo <= value <= hi:
        raise ValueError("not a finite number in range")
    return float(value)


def _int(value, nullable=True):
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 62:
        raise ValueError("not a whole number >= 0")
    return value


def _text(value, limit=500):
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit \
            or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value):
        raise ValueError("not a short printable text")
    return value


def _record(data) -> Evaluation:
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    checks = {"checkpoint": lambda v: _text(v) or "", "iteration": _int,
              "status": lambda v: v if v in ("ok", "failed") else _bad("ok or failed"),
              "mean_return": _float, "episode_length": lambda v: _float(v, 0),
              "success_rate": lambda v: _float(v, 0, 1), "episodes": _int,
              "method": lambda v: _text(v, 100) or "", "seed": _int,
              "evaluated": lambda v: _text(v, 64) or "", "eval_run": lambda v: _text(v, 128) or "",
              "error": _text}
    out = {}
    for key, check in checks.items():
        try:
            out[key] = check(data.get(key))
        except ValueError as exc:
            raise ValueError(f"'{key}': {exc}") from None
    if not out["checkpoint"]:
        raise ValueError("'checkpoint': missing")
    return Evaluation(**out)


def _bad(what: str):
    raise ValueError(f"not {what}")


def read(run_dir: Path) -> tuple[list[Evaluation], list[str]]:
    """The run's evaluation records by iteration, and one line per record that could not be
    read (its file and why). A link in eval/ is never followed; eval/ itself a link: nothing."""
    folder = Path(run_dir) / EVAL_DIR
    try:
        st = os.lstat(folder)
    except OSError:
        return [], []
    if not stat.S_ISDIR(st.st_mode):
        return [], [f"{folder}: not a directory"]
    found, problems = [], []
    with os.scandir(folder) as it:
        names = sorted(e.name for e in it if e.name.endswith(".json")
                       and not e.name.startswith("."))
    for name in names[:MAX_EVALS]:
        path = folder / name
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                raise Unreadable(0, "not a regular file")
            data = json_record(read_regular(path, MAX_EVAL_BYTES))
            rec = _record(data)
            if record_name(rec.checkpoint) != name:
                raise ValueError(f"'checkpoint': {rec.checkpoint!r} is not this file's")
            found.append(rec)
        except (OSError, ValueError, HpctrainError) as exc:
            problems.append(f"{path}: {getattr(exc, 'what', None) or exc}")
    if len(names) > MAX_EVALS:
        problems.append(f"{folder}: more than {MAX_EVALS} records: the first {MAX_EVALS} read")
    found.sort(key=lambda e: (e.iteration is None, e.iteration or 0, e.checkpoint))
    return found, problems


def best(evaluations: list[Evaluation]) -> Evaluation | None:
    """The evaluated checkpoint with the highest mean return (a tie: the later iteration)."""
    scored = [e for e in evaluations if e.status == "ok" and e.mean_return is not None]
    return max(scored, key=lambda e: (e.mean_return, e.iteration or 0)) if scored else None


def as_json(evaluations: list[Evaluation]) -> list[dict]:
    return [msgspec.to_builtins(e) for e in evaluations]

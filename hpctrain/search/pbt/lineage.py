"""A population's workspace in the study's run directory, and its lineage:

    population/member-<i>.jsonl            member i's history, one Record a line (its own writer)
    population/checkpoints/<i>/<interval>/<path>   the checkpoint member i recorded at that
                                           interval (<path>: where it lies in the member's own
                                           run directory, trials/<i:04d>/)

Each member appends only to its own file, so no lock is needed; a checkpoint is copied under a
hidden name and renamed into place before the record naming it is written, so a member never
reads a checkpoint still being written. Every write and removal here goes below the run
directory without following a link (rank/records.open_append and replacing, runs/tree.py): a
link planted as a member's slot or file is refused, or removed itself, never written through. Everything here is read back as untrusted: regular files
only, bounded in bytes and lines, typed by msgspec, and a checkpoint's place is derived from the
member, the interval and a checked relative path, never taken as a path from the record.
"""
from __future__ import annotations

import math
import os
import re
import shutil
from pathlib import Path
from typing import Any, Literal

import msgspec

from ...rank.records import open_append, replacing
from ...runs import tree
from ...runs.untrusted import Budget, Unreadable, nested_within, open_regular

POPULATION = "population"
MAX_LINEAGE = 16 << 20  # bytes of one member's history (~300 bytes a record)
MAX_RECORDS = 50_000
MAX_MEMBERS = 4096
MAX_POPULATION = 64 << 20  # bytes of every member's history together (~64 members' 1 MB)
_REL = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._=+-]{0,200}(/[A-Za-z0-9_][A-Za-z0-9._=+-]{0,200}){0,15}")
Event = Literal["start", "ready", "kept", "exploit", "restart", "end", "failed"]
# The records of a member's own training that carry its score and checkpoint; with an exploit,
# those after which it holds a score and checkpoint (an exploit's: the copy's); and its last.
TRAINED = ("ready", "end")
HOLDING = ("ready", "end", "exploit")
ENDED = ("end", "failed")
MAX_WHY = 300  # characters of a record's reason


class Record(msgspec.Struct, kw_only=True, omit_defaults=True):
    member: int
    event: Event
    time: float
    params: dict[str, Any]
    interval: int = 0  # step // pbt.interval of the step it recorded at
    step: int | None = None
    score: float | None = None
    checkpoint: str | None = None  # its path inside the member's own run dir (ready, end)
    parent: int | None = None  # exploit: the member it copied ...
    parent_interval: int | None = None  # ... at that member's record of this interval
    resampled: list[str] = []  # exploit: the keys drawn afresh from the space (not perturbed)
    why: str = ""  # kept: why the member did not copy at that interval (`status` shows it)
    note: str = ""


def population_dir(run_dir) -> Path:
    return Path(run_dir) / POPULATION


def lineage_path(run_dir, member: int) -> Path:
    return population_dir(run_dir) / f"member-{member}.jsonl"


def good_rel(rel: str | None) -> bool:
    """A checkpoint's path inside a member directory: relative, plain names, no '..'."""
    return bool(rel) and _REL.fullmatch(rel) is not None and ".." not in rel.split("/")


def slot(interval: int, parent: int | None = None) -> str:
    """A member's folder in the workspace for one record: <interval> for its own checkpoint,
    <interval>-<parent> for a copy of that member's (the two can share a relative path, and a
    record must keep naming the file it was written for)."""
    return f"{interval:06d}" if parent is None else f"{interval:06d}-{int(parent)}"


SLOT = re.compile(r"\d{6,}(-\d+)?")


def saved_path(run_dir, member: int, interval: int, rel: str, parent: int | None = None) -> Path:
    """Where member's checkpoint of that interval (or its copy of parent's) lies in the
    workspace (rel checked)."""
    if not good_rel(rel):
        raise ValueError(f"not a checkpoint path inside a member's directory: {rel!r}")
    return population_dir(run_dir) / "checkpoints" / str(member) / slot(interval, parent) / rel


def record_path(run_dir, rec: "Record") -> Path:
    """The workspace file a record with a checkpoint names."""
    return saved_path(run_dir, rec.member, rec.interval, rec.checkpoint,
                      rec.parent if rec.event == "exploit" else None)


def append(run_dir, rec: Record) -> None:
    """One line onto the member's own history, whole (O_APPEND, one write), then to disk; the
    file and population/ made and entered without following a link (rank/records.open_append)."""
    line = msgspec.json.encode(rec) + b"\n"
    with open_append(str(lineage_path(run_dir, rec.member)), str(run_dir)) as f:
        os.write(f.fileno(), line)
        os.fsync(f.fileno())


def _valid(rec: Record, member: int) -> bool:
    nums = [v for v in (rec.score, rec.time) if v is not None]
    return (rec.member == member and all(math.isfinite(v) for v in nums)
            and 0 <= rec.interval < (1 << 40) and (rec.step is None or 0 <= rec.step < (1 << 62))
            and (rec.parent is None or 0 <= rec.parent < MAX_MEMBERS)
            and (rec.checkpoint is None or good_rel(rec.checkpoint))
            and len(rec.params) <= 64 and len(rec.note) <= 1000 and len(rec.why) <= MAX_WHY
            and len(rec.resampled) <= 64 and all(len(k) <= 200 for k in rec.resampled)
            and nested_within(rec.params))


def read(run_dir, member: int, budget: Budget | None = None) -> list[Record]:
    """Member's history, oldest first; a torn or malformed line is left out (a writer killed
    mid-line), as is any record that fails its checks. [] when there is none yet. Unreadable
    (an OSError) when the file is not a regular file, is larger than MAX_LINEAGE, or goes
    beyond what `budget` has left."""
    path = lineage_path(run_dir, member)
    try:
        with open_regular(path) as f:
            if os.fstat(f.fileno()).st_size > MAX_LINEAGE:
                raise Unreadable(0, f"{path} is larger than {MAX_LINEAGE >> 20} MiB")
            if budget is not None:
                budget.open(path)
            data = f.read(MAX_LINEAGE + 1)
    except FileNotFoundError:
        return []
    if len(data) > MAX_LINEAGE:
        raise Unreadable(0, f"{path} is larger than {MAX_LINEAGE >> 20} MiB")
    if budget is not None:
        budget.take(path, len(data))
    out = []
    for line in data.split(b"\n")[:MAX_RECORDS]:
        if not line.strip():
            continue
        try:
            rec = msgspec.json.decode(line, type=Record)
        except (msgspec.DecodeError, RecursionError):  # msgspec stops deep nesting so
            continue
        if _valid(rec, member):
            out.append(rec)
    return out


def read_all(run_dir, members: int, strict: bool = True) -> dict[int, list[Record]]:
    """Every member's history, all files together within MAX_POPULATION bytes. strict: an
    unreadable file raises (Unreadable, for whoever shows the population); else that member
    has no records (a member comparing itself with the others goes on without it)."""
    budget = Budget(MAX_POPULATION, MAX_MEMBERS)
    out = {}
    for i in range(min(members, MAX_MEMBERS)):
        try:
            out[i] = read(run_dir, i, budget)
        except OSError:
            if strict:
                raise
            out[i] = []
    return out


def copy_file(src: Path, dst: Path, root=None) -> int:
    """Copy a regular file to dst through a hidden name in its directory, then rename: a reader
    of dst sees the whole file or none. Neither end is reached through a link: each directory
    below `root` (the run directory; by default each file's own) is entered without following
    one, and a link at src is refused (runs/tree.open_file, rank/records.replacing). Returns its
    size; Unreadable when src changed while it was copied, OSError for the rest."""
    fd = tree.open_file(src, src.parent if root is None else root)
    try:
        before = os.fstat(fd)
        with replacing(str(dst), None if root is None else str(root)) as writer, \
                open(fd, "rb", closefd=False) as reader:
            shutil.copyfileobj(reader, writer, 1 << 20)  # whole writes, unlike one os.write
            writer.flush()
            os.fsync(writer.fileno())
            after = os.fstat(fd)
            if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
                # Raised inside the block: the hidden copy goes, dst stays as it was.
                raise Unreadable(0, f"{src} changed while it was copied (still being written)")
    finally:
        os.close(fd)
    return after.st_size

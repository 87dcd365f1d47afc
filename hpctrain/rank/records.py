"""The run directory's records, as typed structures: the one place that defines and reads them.

    run.json                 RunRecord      what was submitted, where, and what became of it
    bootstrap.json           RankConfig     what every rank's bootstrap does (written at submit)
    status/rank-R.json       RankIdentity   written by rank R at start: node, pid
    status/rank-R.failed.json RankFailure   written by rank R when its program failed
    status/progress-R.json   Progress       written by rank R as its training advances
    status/stop-R.json       StopRequest    written by rank R when SIGTERM or the preemption signal came
    status/failure.json      JobFailure     why the job's latest attempt ended without success
    status/failures.jsonl    JobFailure     the earlier ones, one a line (archive_job_failure)
    status/excluded.json     ExcludedNode   the nodes this run no longer runs on, and why

Standard library only: the ranks write these (under whatever interpreter the job uses) and the
submitting side reads them. A record that is not valid JSON, or holds a value of the wrong type,
raises RecordError naming the file — a corrupt file is reported, never half-read.
"""
from __future__ import annotations

import dataclasses
import datetime
import errno
import glob
import json
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


class RecordError(ValueError):
    """A record file that cannot be read as what it should be."""


# ----------------------------------------------------------------------------- typing

_TYPES: dict[str, tuple] = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,),
                            "list": (list,), "dict": (dict,), "Any": (object,)}


def _accepts(annotation: str, value: Any) -> bool:
    """Whether `value` fits a field annotation as written in this module ('int | None', ...)."""
    for part in annotation.split("|"):
        name = part.strip().split("[", 1)[0]
        if name == "None":
            if value is None:
                return True
            continue
        types = _TYPES[name]
        # bool is an int in Python; a record's int field must not take true/false.
        if isinstance(value, bool) and bool not in types and name != "Any":
            continue
        if isinstance(value, types):
            return True
    return False


def build_record(cls, data: Any, source: str):
    """A record of dataclass `cls` from decoded JSON, each field checked against its annotation
    (RecordError naming `source` when one is missing or of the wrong type); keys it does not
    know are kept in its `extra`, where it has one. For a reader that reads the bytes itself:
    runs/records.py reads run.json with the bounds of an untrusted run directory."""
    if not isinstance(data, dict):
        raise RecordError(f"{source}: expected a JSON object, found {type(data).__name__}")
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RecordError(f"{source}: the key '{f.name}' is missing")
            continue
        value = data[f.name]
        if not _accepts(f.type, value):
            raise RecordError(f"{source}: '{f.name}' is {type(value).__name__} "
                              f"{json.dumps(value)[:60]}, expected {f.type}")
        values[f.name] = value
    # Keys this version does not know (a newer hpctrain wrote the file) are kept aside, not lost.
    extra = {k: v for k, v in data.items() if k not in values and k not in _names(cls)}
    obj = cls(**values)
    if extra and hasattr(obj, "extra"):
        obj.extra = extra
    return obj


def _names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


MAX_RECORD = 8 << 20
MAX_LINE = 1 << 20  # one line of a .jsonl record: far above any line hpctrain writes


# ----------------------------------------------------------------------------- the one way in and out
# A run directory is shared, untrusted data: whoever can write there can put a symbolic link, a
# named pipe or a hard link where hpctrain expects its own file. So every read here is of a
# regular file only and bounded, and every write goes through `replacing` or `open_append`:
# each directory below the caller's root is entered without following a link (O_NOFOLLOW, one
# dir_fd to the next), and the file itself is never a link, a pipe or another's hard link.

class NotRegular(OSError):
    """A path in a run directory that hpctrain will not write through: a symbolic link, a named
    pipe, a device, or a directory where a file should be."""

    def __str__(self) -> str:
        return str(self.strerror)


def what_it_is(mode: int) -> str:
    """What a path that is not a regular file is, in words (for the refusals)."""
    import stat
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def _refuse(fd: int, name: str, path: str, want: str) -> NotRegular:
    try:
        what = what_it_is(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        what = "not " + want
    return NotRegular(0, f"{path} is {what}, not {want}: hpctrain does not write through it "
                         "(remove it; hpctrain makes its own)")


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def under_root(path: str, root: str | None) -> tuple[str, list[str], str]:
    """(root, the directories between it and `path`, path's own name): `path` must lie below
    `root` (default: its own directory), with no '..' on the way."""
    root = root if root is not None else (os.path.dirname(path) or ".")
    rel = os.path.relpath(path, root).split(os.sep)
    if rel[0] == os.pardir or os.pardir in rel or rel[-1] in ("", os.curdir):
        raise NotRegular(0, f"{path} is not a file under {root}")
    return root, [p for p in rel[:-1] if p not in ("", os.curdir)], rel[-1]


def open_dir(root: str, parts: list[str], create: bool = True) -> int:
    """An open directory fd: `root` (the caller's own path, links followed), then each of
    `parts` below it entered without following a link, made where missing (create)."""
    if create:
        os.makedirs(root, exist_ok=True)  # the caller's own path: made as makedirs makes it
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            try:
                try:
                    nxt = os.open(part, _DIR, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    try:
                        os.mkdir(part, dir_fd=fd)
                    except FileExistsError:
                        pass
                    nxt = os.open(part, _DIR, dir_fd=fd)
            except OSError as exc:
                if isinstance(exc, FileNotFoundError) or exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                raise _refuse(fd, part, os.path.join(root, *parts[:i + 1]), "a directory") from None
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def replacing(path: str, root: str | None = None):
    """A binary file whose bytes replace `path` when the block ends (atomically: a reader sees
    the old file or the new one). `root`: the run directory (default: the file's own); each
    directory between is made or entered without following a link, and a link, a pipe or any
    other non-regular file at `path` is refused (NotRegular) before anything is written."""
    import stat
    root, parts, name = under_root(path, root)
    fd = open_dir(root, parts)
    try:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise _refuse(fd, name, path, "a regular file")
        # A name nobody can guess, made new (O_EXCL): a link planted there in advance cannot be.
        tmp = f".{name[:200]}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        tfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      0o666, dir_fd=fd)
        try:
            with os.fdopen(tfd, "wb") as f:
                yield f
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)  # replaces, never follows
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=fd)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)


def write_file(path: str, data: bytes, root: str | None = None) -> None:
    with replacing(path, root) as f:
        f.write(data)


def open_append(path: str, root: str | None = None, mode: str = "ab", **kwargs):
    """`path` opened for appending (made if missing), under `root` as `replacing` checks it:
    never through a link, never a pipe or device (opened without waiting, then refused), never
    a file with other hard links (someone else's file put there)."""
    import stat
    root, parts, name = under_root(path, root)
    fd = open_dir(root, parts)
    try:
        try:
            afd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                          | os.O_CLOEXEC | os.O_NOCTTY, 0o666, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):  # a link, a pipe nobody reads
                raise _refuse(fd, name, path, "a regular file") from None
            raise
        try:
            st = os.fstat(afd)
            if not stat.S_ISREG(st.st_mode):
                raise _refuse(fd, name, path, "a regular file")
            if st.st_nlink > 1:
                raise NotRegular(0, f"{path} has {st.st_nlink} names (hard links): another "
                                    "file's, not hpctrain's; hpctrain does not write into it")
            os.set_blocking(afd, True)
            return os.fdopen(afd, mode, **kwargs)
        except BaseException:
            os.close(afd)
            raise
    finally:
        os.close(fd)


def read_bytes(path: str, limit: int = MAX_RECORD) -> bytes:
    """A regular file's bytes, at most `limit`: a run directory is shared, untrusted data, and
    a named pipe, a device or a socket put in a record's place must not hang its reader (opened
    without waiting, then refused). RecordError for those and for a file over the limit."""
    import stat
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RecordError(f"{path}: not a regular file (a pipe, device or socket?)")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            fd = -1
            data = f.read(limit + 1)
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > limit:
        raise RecordError(f"{path}: larger than {limit >> 20} MiB")
    return data


def read_lines(path: str, limit: int = MAX_RECORD, max_line: int = MAX_LINE) -> list[bytes]:
    """The lines of a bounded regular file (read_bytes), a damaged overlong one left out."""
    return [line for line in read_bytes(path, limit).splitlines() if len(line) <= max_line]


def read_json(path: str, limit: int = MAX_RECORD) -> Any:
    try:
        return json.loads(read_bytes(path, limit).decode("utf-8"))
    except UnicodeDecodeError:
        raise RecordError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise RecordError(f"{path}: nested too deeply") from None


def bootstrap_section(run_dir: str, key: str) -> dict | None:
    """One mapping of the run's bootstrap.json (a run directory's: untrusted), or None when
    it is missing or not a mapping."""
    try:
        data = read_json(os.path.join(run_dir, "bootstrap.json"))
    except (OSError, ValueError):
        return None
    section = data.get(key) if isinstance(data, dict) else None
    return section if isinstance(section, dict) else None


def write_json(path: str, data: Any, indent: int | None = 2, root: str | None = None) -> None:
    """Write atomically: a reader sees the old file or the new one, never half of one; never
    through a link below `root` (the run directory; default the file's own: replacing)."""
    text = json.dumps(data, indent=indent, sort_keys=True) + "\n"
    write_file(path, text.encode("utf-8"), root)


def _asdict(obj) -> dict:
    out = dataclasses.asdict(obj)
    out.pop("extra", None)
    out.update(getattr(obj, "extra", None) or {})
    return out


RANK_FOLDER = os.path.dirname(os.path.abspath(__file__))  # run as `python RANK_FOLDER COMMAND ...`


def now(timespec: str = "seconds") -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec=timespec)


# ----------------------------------------------------------------------------- bootstrap.json

@dataclass
class RankConfig:
    """bootstrap.json: everything a rank's bootstrap needs, decided at submit time (plan.py)."""
    program: list = field(default_factory=list)  # [script or -m module, *args], byte-exact
    library: str = "command"
    cpu_mode: str = "auto"  # auto | on | off
    cpu_shims: list = field(default_factory=list)  # names in rank/cpu_shims.SHIMS
    seed: int | None = None
    threads_from_env: bool = False  # the job set OMP_NUM_THREADS itself
    collective_timeout: int | None = None
    launcher: str = "torchrun"  # torchrun | tasks
    rank_env: dict = field(default_factory=dict)  # NAME -> template over the rank's identity
    unset_env: list = field(default_factory=list)
    chdir_run_dir: bool = False
    env: dict = field(default_factory=dict)  # the site's set (NCCL ...), applied first
    preempt_signal: str | None = None  # USR2, TERM, ...
    checkpoint_patterns: list = field(default_factory=list)
    resume_args: list = field(default_factory=list)
    rank_check_timeout: float | None = None  # the preflight's rank meeting; None: none
    train_hooks: list = field(default_factory=list)  # names in rank/train_hooks.HOOKS
    sample_every: float = 5  # the node sampler's interval (rank/during/sampler.py); 0: none
    idle_gpus: dict | None = None  # {"below": percent, "for": seconds}: stop on idle GPUs
    health: dict | None = None  # the node check's health gate (rank/before/health.py); None: none
    slow_ranks: dict | None = None  # {factor, window, exclude} (rank/during/slow.py); None: not judged
    netfloor: dict | None = None  # {min_gbps, timeout} (rank/before/netfloor.py); None: not measured
    extra: dict = field(default_factory=dict)

    @classmethod
    def load(cls, path: str) -> "RankConfig":
        return build_record(cls, read_json(path), path)

    def to_dict(self) -> dict:
        return _asdict(self)


# ----------------------------------------------------------------------------- per rank

@dataclass
class RankIdentity:
    """status/rank-R.json: which node and process a rank is, so logs and cancel find it."""
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node: str
    pid: int = 0
    started: float = 0.0
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return _asdict(self)


@dataclass
class RankFailure:
    """status/rank-R.failed.json: why rank R's program failed (the last attempt's error)."""
    rank: int
    node: str
    exit_status: int
    error: str
    job_restart: int = 0
    torchrun_restart: int = 0
    time: str = ""  # UTC, milliseconds: the first failure (the cause) sorts before its effects
    task: int | None = None  # a sweep's task, filled in by the reader
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return _asdict(self)


@dataclass
class JobFailure:
    """status/failure.json: why the job ended without success (the batch shell), or why its
    ranks were stopped (the hang watcher)."""
    reason: str  # ranks | preflight | preempted | cancelled | hang | ...
    exit_status: int
    message: str
    ranks: list = field(default_factory=list)  # RankFailure dicts (a hang: the stuck ranks)
    job_id: str | None = None
    job_restart: int = 0
    node: str | None = None  # where the batch shell ran
    time: str = ""
    # The nodes this failure blames (rank/end/recovery.py): the preflight's unreachable ones, a
    # hang's stuck ranks' (when not every node's), a rank's node on a hardware error.
    nodes: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return _asdict(self)


def _status_dirs(run_dir: str) -> list[tuple[int | None, str]]:
    """(task, status dir) of a run: its own, and each sweep task's."""
    out: list[tuple[int | None, str]] = [(None, os.path.join(run_dir, "status"))]
    for d in glob.glob(os.path.join(run_dir, "tasks", "*", "status")):
        task = os.path.basename(os.path.dirname(d))
        if task.isdigit():
            out.append((int(task), d))
    return sorted(out, key=lambda t: -1 if t[0] is None else t[0])


_RANK_FILE = re.compile(r"^rank-(\d+)\.json$")
_FAILED_FILE = re.compile(r"^rank-(\d+)\.failed\.json$")


MAX_RANKS = 65536  # per-rank files of one kind read from one status directory
MAX_RANK_RECORD = 1 << 20  # one rank's record (an identity, a progress report, a failure)
MAX_RANK_BYTES = 256 << 20  # all of one kind's records of one status directory together


def _rank_files(status_dir: str, pattern: re.Pattern) -> list[tuple[int, str]]:
    try:
        names = os.listdir(status_dir)
    except OSError:
        return []
    out = [(int(m.group(1)), os.path.join(status_dir, n)) for n in names if (m := pattern.match(n))]
    return sorted(out)[:MAX_RANKS]


def _rank_records(files: list[tuple[int, str]]):
    """(rank, path, its JSON or the error) of each file, bounded each and all together: forty
    hard links of one large record cost what the bound allows, not forty times it."""
    left = MAX_RANK_BYTES
    for rank, path in files:
        if left <= 0:
            return
        try:
            data = read_bytes(path, min(MAX_RANK_RECORD, left))
            left -= len(data)
            yield rank, path, json.loads(data.decode("utf-8"))
        except (OSError, RecordError, ValueError, RecursionError) as exc:
            yield rank, path, exc if isinstance(exc, (OSError, RecordError)) else \
                RecordError(f"{path}: not valid JSON or UTF-8 text")


def identity_path(status_dir: str, rank: int) -> str:
    return os.path.join(status_dir, f"rank-{rank}.json")


def failure_path(status_dir: str, rank: int) -> str:
    return os.path.join(status_dir, f"rank-{rank}.failed.json")


def write_identity(status_dir: str, ident: RankIdentity) -> None:
    write_json(identity_path(status_dir, ident.rank), ident.to_dict(), indent=None,
               root=os.path.dirname(status_dir))


def read_identities(directory: str) -> list[RankIdentity]:
    """Every rank that started in this run (or sweep task) directory, by rank. Files being
    replaced or that are corrupt are left out: a rank's identity is a hint, not a verdict."""
    out = []
    for _, path, data in _rank_records(_rank_files(os.path.join(directory, "status"), _RANK_FILE)):
        try:
            if not isinstance(data, Exception):
                out.append(build_record(RankIdentity, data, path))
        except RecordError:
            continue
    return out


def write_rank_failure(status_dir: str, failure: RankFailure) -> None:
    write_json(failure_path(status_dir, failure.rank), failure.to_dict(), indent=None,
               root=os.path.dirname(status_dir))


def clear_rank_failure(status_dir: str, rank: int) -> None:
    try:
        os.remove(failure_path(status_dir, rank))
    except OSError:
        pass


def read_rank_failures(run_dir: str, tasks: bool = True) -> list[RankFailure]:
    """The one reader of rank failures: the run's, and (tasks=True) every sweep task's, ordered
    by task and rank. A corrupt note becomes a failure whose error says so."""
    out = []
    dirs = _status_dirs(run_dir) if tasks else [(None, os.path.join(run_dir, "status"))]
    for task, status_dir in dirs:
        for rank, path, data in _rank_records(_rank_files(status_dir, _FAILED_FILE)):
            try:
                if isinstance(data, Exception):
                    raise data
                failure = build_record(RankFailure, data, path)
            except (OSError, RecordError) as exc:
                failure = RankFailure(rank=rank, node="?", exit_status=1, error=f"unreadable: {exc}")
            failure.task = task
            out.append(failure)
    return out


# A rank's error that says it lost a peer, not why: a collective's connection closed or reset.
_LOST_PEER = re.compile(r"connection closed by peer|connection reset by peer|broken pipe|"
                        r"econnreset|connection refused|socket closed|peer .* closed|"
                        r"communicator was aborted|remote process exited|recv.*failed|"
                        r"Connection closed", re.IGNORECASE)
_KILLED = re.compile(r"^(killed by |signal \d+|.*\bSIG(KILL|SEGV|BUS|ABRT|TERM)\b)", re.IGNORECASE)


def cause_rank(failure: RankFailure) -> int:
    """How surely a failure is the cause, not an effect: 0 a rank killed by a signal (its record
    is written after the fact, by whoever saw it die, so its time says nothing), 1 an error of
    the rank's own, 2 a rank that only lost a peer."""
    if _KILLED.search(failure.error or ""):
        return 0
    return 2 if _LOST_PEER.search(failure.error or "") else 1


def first_failure(failures: list[RankFailure]) -> RankFailure | None:
    """The cause: a rank that died (a signal) before one that failed of its own, before one
    that only lost a peer; among equals the earliest (its peers fail a moment later)."""
    return min(failures, key=lambda f: (cause_rank(f), f.time or "~", f.rank)) if failures else None


@dataclass
class Progress:
    """status/progress-R.json: how far rank R's training got (rank/progress.report)."""
    rank: int
    step: int  # the library's own count: iteration, update, epoch
    time: float  # when it reported it (epoch seconds)
    rate: float | None = None  # steps per second since this attempt's first report
    metrics: dict = field(default_factory=dict)  # the newest values: reward, loss, ...
    attempt: int = 0  # SLURM_RESTART_COUNT when it reported (requeues start a new attempt)
    since: float = 0.0  # this attempt's first report (epoch seconds): the rate's window
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return _asdict(self)


_PROGRESS_FILE = re.compile(r"^progress-(\d+)\.json$")


def write_progress(status_dir: str, progress: Progress) -> None:
    write_json(os.path.join(status_dir, f"progress-{progress.rank}.json"), progress.to_dict(),
               indent=None, root=os.path.dirname(status_dir))


def read_progress(directory: str) -> list[Progress]:
    """Every rank's newest progress in this run (or sweep task) directory, by rank; files being
    replaced or damaged are left out (progress is a report, not a verdict)."""
    out = []
    for _, path, data in _rank_records(_rank_files(os.path.join(directory, "status"),
                                                    _PROGRESS_FILE)):
        try:
            if not isinstance(data, Exception):
                out.append(_checked_progress(build_record(Progress, data, path), path))
        except RecordError:
            continue
    return out


MAX_TIME = 1e11  # epoch seconds (the year 5138): far beyond any real report
MAX_INT = (1 << 63) - 1  # what JSON readers (and msgspec) take as a whole number


def _finite(value, lo: float, hi: float) -> bool:
    return lo <= value <= hi  # False for NaN; ±Infinity and huge values are out of range


def _checked_progress(p: Progress, path: str) -> Progress:
    """A report's numbers within what a rank can write (a run directory is shared: a forged or
    damaged file must not reach the readers' arithmetic and formats): RecordError otherwise.
    A metric that is not a number is left out; a NaN or infinite one (a diverged training) is
    kept as None, which JSON can carry."""
    if not (_finite(p.rank, 0, MAX_INT) and _finite(p.step, -MAX_INT, MAX_INT)
            and _finite(p.attempt, 0, 1 << 31) and _finite(p.time, 0, MAX_TIME)
            and _finite(p.since, 0, MAX_TIME)
            and (p.rate is None or _finite(p.rate, 0, 1e15))):
        raise RecordError(f"{path}: a value out of range")
    metrics = {}
    for name, value in list(p.metrics.items())[:1000]:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and len(name) <= 200:
            metrics[name] = float(value) if _finite(value, -1e300, 1e300) else None
    p.metrics = metrics
    return p


def write_job_failure(run_dir: str, failure: JobFailure) -> None:
    status_dir = os.path.join(run_dir, "status")
    write_json(os.path.join(status_dir, "failure.json"), failure.to_dict(), root=run_dir)


def read_job_failure(run_dir: str) -> JobFailure | None:
    path = os.path.join(run_dir, "status", "failure.json")
    if not os.path.exists(path):
        return None
    try:
        return build_record(JobFailure, read_json(path), path)
    except (OSError, RecordError) as exc:
        return JobFailure(reason="unknown", exit_status=1, message=f"unreadable: {exc}")


def archive_job_failure(run_dir: str) -> bool:
    """Move status/failure.json to the end of status/failures.jsonl: a new attempt starts, or
    the job succeeded after all (a restart after a hang). True when there was one."""
    status_dir = os.path.join(run_dir, "status")
    path = os.path.join(status_dir, "failure.json")
    try:
        data = read_json(path)
    except FileNotFoundError:
        return False
    except (OSError, RecordError) as exc:
        data = {"reason": "unknown", "exit_status": 1, "message": f"unreadable: {exc}"}
    with open_append(os.path.join(status_dir, "failures.jsonl"), run_dir, "a",
                     encoding="utf-8") as f:
        f.write(json.dumps(data, sort_keys=True) + "\n")
    try:
        os.remove(path)
    except OSError:
        pass
    return True


def read_job_failures(run_dir: str) -> list[JobFailure]:
    """Every earlier failure of the run (status/failures.jsonl), oldest first; damaged lines
    are left out."""
    path = os.path.join(run_dir, "status", "failures.jsonl")
    out = []
    try:
        lines = read_bytes(path).decode("utf-8", errors="replace").splitlines()
    except (OSError, RecordError):
        return []
    for line in lines:
        try:
            out.append(build_record(JobFailure, json.loads(line), path))
        except (ValueError, RecordError):
            continue
    return out


# ----------------------------------------------------------------------------- stop, exclusion

@dataclass
class StopRequest:
    """status/stop-R.json: rank R received SIGTERM or the preemption signal ("save now")."""
    rank: int
    signal: str  # TERM, USR2, ...
    time: float
    job_id: str | None = None
    job_restart: int = 0
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return _asdict(self)


def write_stop_request(status_dir: str, request: StopRequest) -> None:
    write_json(os.path.join(status_dir, f"stop-{request.rank}.json"), request.to_dict(), indent=None,
               root=os.path.dirname(status_dir))


def clear_stop_request(status_dir: str, rank: int) -> None:
    try:
        os.remove(os.path.join(status_dir, f"stop-{rank}.json"))
    except OSError:
        pass


@dataclass
class ExcludedNode:
    """One entry of status/excluded.json: a node the run's next allocations leave out."""
    node: str
    reason: str  # the failure's reason: preflight | hang | ranks
    message: str
    time: str = ""
    job_id: str | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return _asdict(self)


def excluded_path(run_dir: str) -> str:
    return os.path.join(run_dir, "status", "excluded.json")


def read_excluded(run_dir: str) -> list[ExcludedNode]:
    path = excluded_path(run_dir)
    try:
        data = read_json(path)
    except FileNotFoundError:
        return []
    except (OSError, RecordError):
        return []
    if not isinstance(data, list):
        return []
    out = []
    for item in data:
        try:
            out.append(build_record(ExcludedNode, item, path))
        except RecordError:
            continue
    return out


def write_excluded(run_dir: str, nodes: list[ExcludedNode]) -> None:
    write_json(excluded_path(run_dir), [n.to_dict() for n in nodes], root=run_dir)


# ----------------------------------------------------------------------------- run.json

@dataclass
class RunRecord:
    """run.json: one per run directory, written at submit and updated as the run is followed."""
    run_id: str
    name: str
    site: str
    backend: str  # the backend that answers for it: slurm | local | submitit | ...
    site_ref: str = ""  # the site as the user named it (a name or a profile path)
    scheduler: str | None = None  # submitit runs: the scheduler submitit used (slurm | local)
    library: str = "command"
    nodes: int = 1
    procs_per_node: int = 1
    script: str | None = None  # the script's file name in the run directory
    source: str = ""  # the job file
    workdir: str = ""
    job_id: str | None = None  # the scheduler's id: 1234, local-4321
    state: str = "SUBMITTING"  # the last state seen
    exit_code: int | None = None
    reason: str | None = None  # why it is in that state, when the scheduler said (or hpctrain)
    final: bool = False  # the state is final: no need to ask the scheduler again
    task_states: list = field(default_factory=list)  # [[job, state, exit code], ...] once final
    submitted: str | None = None
    submitted_ts: float | None = None
    pid: int | None = None  # the local backend: the job's process (group leader)
    pid_start: str | None = None  # its kernel start time: tells it from a reused pid
    cancelled: float | None = None  # when `cancel` was asked (epoch seconds)
    hpctrain_version: str = ""
    git: dict = field(default_factory=dict)  # commit and dirty flag of the submitted code
    array_size: int | None = None  # a sweep: its number of tasks
    parallel: int | None = None  # a sweep: tasks running at once
    task_values: list = field(default_factory=list)  # a sweep: what each task changes
    kind: str = "command"  # command | function
    ntasks: int = 1  # function runs: submitit tasks (one per rank)
    submitit_folder: str | None = None
    function: dict = field(default_factory=dict)  # function runs: what ran (module, source hash)
    after: list = field(default_factory=list)  # runs it waits for: [{mode, run_id, job_id, path}]
    snapshot: dict = field(default_factory=dict)  # the code copied into the run (hpctrain/runs/snapshot.py)
    jobs: list = field(default_factory=list)  # earlier job ids of this run (submit --resume)
    extra: dict = field(default_factory=dict)

    @classmethod
    def load(cls, path: str) -> "RunRecord":
        return build_record(cls, read_json(path), path)

    def to_dict(self) -> dict:
        return _asdict(self)

    def save(self, path: str) -> None:
        write_json(path, self.to_dict())


MAX_NODES = 4096  # node records read back


def failed_nodes(run_dir: str) -> list[dict]:
    """The verdicts of this attempt's nodes that failed their health gate (status/health/*.json,
    written by before/health.py), by node."""
    directory = os.path.join(run_dir, "status", "health")
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))[:MAX_NODES]
    except OSError:
        return []
    out = []
    for name in names:
        try:
            data = read_json(os.path.join(directory, name))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("ok") is False and isinstance(
                data.get("node"), str) and isinstance(data.get("problems"), list):
            out.append(data)
    return out

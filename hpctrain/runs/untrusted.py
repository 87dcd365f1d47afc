"""A run directory is untrusted data: what is read from it is checked before it is used.

Run directories live on shared file systems (a team's runs_dir, scratch) and anyone who can write
there can write a run.json, a status file or a log. So, the same rules as for a job file:

- only regular files are read, never a FIFO, a device or a socket (opening one of those could
  wait for ever, or read for ever), and never more than a bound (read_regular, open_regular);
- run.json's values are checked for type, size and shape (check_record): ids against strict
  patterns, counts bounded, lists and strings of a bounded length; a record that fails names
  the file and the key, as an HpctrainError (exit 2), never an internal error;
- commands are never read from a record: the backends rebuild them from checked parts
  (backends/ssh/openssh.py checked_words), and nothing is unpickled to decide a state.
"""
from __future__ import annotations

import os
import re
import stat
from contextlib import contextmanager
from pathlib import Path

from ..errors import HpctrainError
from ..rank.records import what_it_is
from ..schema.spec import NAME_PATTERN

# Bounds: far above anything hpctrain writes, far below what could exhaust a machine.
MAX_RECORD = 8 << 20  # run.json, an index line's file, a status record
MAX_SMALL = 4096  # a pid or an exit code file
MAX_COUNT = 100_000  # array tasks, submitit tasks, nodes; Slurm's own MaxArraySize caps at 4000001
MAX_PROCS = 4096  # ranks per node
MAX_TEXT = 4096  # one string value of a record
MAX_LIST = 100_000  # entries of one list of a record
MAX_LINE = 1 << 20  # one line of a .jsonl file (a sample line is ~200 bytes)
MAX_COMMAND_BYTES = 1 << 30  # bytes one command reads from run directories, all files together
MAX_FILES = 100_000  # files one command reads from run directories
MAX_DEPTH = 64  # lists and mappings within one another in one record (hpctrain's nest < 10)

# Ids as hpctrain makes them: run ids (runs/records.new_run_id), job names, job ids of any backend
# (1234, 1234_5, local-4321, ws1:4321): letters, digits and . _ - : @, never a space, a newline,
# a quote or a leading '-'.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
NAME = re.compile(NAME_PATTERN)  # the schema's job and site names
JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}")


class Unreadable(OSError):
    """A path in a run directory that is not a regular file, or is larger than its bound."""

    def __str__(self) -> str:
        return str(self.strerror)


def open_regular(path, mode: str = "rb"):
    """Open a file for reading only if it is a regular file (symbolic links followed): a FIFO is
    opened without waiting for a writer (O_NONBLOCK) and refused, as are devices and sockets.
    FileNotFoundError as open() raises it; Unreadable for the rest."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unreadable(0, f"{path} is {what_it_is(st.st_mode)}, not a regular file")
        os.set_blocking(fd, True)
        f = os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return f


def read_regular(path, limit: int = MAX_RECORD) -> bytes:
    """A regular file's bytes, at most `limit` of them (Unreadable when it holds more)."""
    with open_regular(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise Unreadable(0, f"{path} is larger than {_size(limit)}")
    return data


def read_text(path, limit: int = MAX_RECORD) -> str:
    return read_regular(path, limit).decode("utf-8", errors="replace")


class Budget:
    """What one command reads from run directories, all files together: a bound in bytes and
    in files, so that forty hard links (or forty copies) of one large file, each within its own
    bound, still cannot fill the memory. Take one per command; a reader charges what it read."""

    def __init__(self, limit: int = MAX_COMMAND_BYTES, files: int = MAX_FILES):
        self.left, self.files = limit, files
        self.limit = limit

    def open(self, path) -> None:
        """Charge one file (Unreadable when the command has read its number of files)."""
        if self.files <= 0:
            raise Unreadable(0, f"{path}: not read, this command has read its {MAX_FILES} files")
        self.files -= 1

    def take(self, path, n: int) -> None:
        """Charge n bytes (Unreadable once the command has read its bytes)."""
        self.left -= n
        if self.left < 0:
            raise Unreadable(0, f"{path}: not read to its end, this command has read "
                                f"{_size(self.limit)} from run directories")


def read_lines(path, budget: Budget | None = None, limit: int = MAX_RECORD,
               max_line: int = MAX_LINE, max_lines: int = MAX_LIST):
    """The lines of a regular file (bytes, without their newline), read a piece at a time:
    at most `limit` bytes and `max_lines` lines, each charged to `budget`. A line longer than
    `max_line` ends the reading (a damaged or forged file: a 3 GiB file with no newline costs
    `max_line` bytes, not 3 GiB); what came before it is kept."""
    if budget is not None:
        budget.open(path)
    with open_regular(path) as f:
        pending, read, count = b"", 0, 0
        while read < limit and count < max_lines:
            chunk = f.read(min(1 << 16, limit - read))
            if not chunk:
                break
            read += len(chunk)
            if budget is not None:
                budget.take(path, len(chunk))
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines[:max_lines - count]:
                if len(line) > max_line:
                    return
                yield line
            count += len(lines)
            if len(pending) > max_line:
                return
        if pending and count < max_lines and read < limit and len(pending) <= max_line:
            yield pending


def nested_within(value, limit: int = MAX_DEPTH) -> bool:
    """Whether a decoded JSON value holds lists and mappings at most `limit` deep. A record
    nested thousands deep decodes (the parsers stop near 1,000), then breaks whatever walks it
    next with a RecursionError: a deepcopy, str(), an encoder. Walked here without recursion."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth >= limit:
                    return False
                stack.append((child, depth + 1))
    return True


def json_record(line: bytes, limit: int = MAX_DEPTH):
    """One JSON value of a run directory's file (a .jsonl line, a journal record): ValueError
    when it is not JSON or nests deeper than `limit` (RecursionError included)."""
    import json
    try:
        value = json.loads(line)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    # Fewer brackets than the bound cannot nest deeper than it: most records are not walked.
    if line.count(b"[") + line.count(b"{") > limit and not nested_within(value, limit):
        raise ValueError("nested too deeply")
    return value


# ----------------------------------------------------------------------------- writing

@contextmanager
def writing(path, root=None):
    """A binary file whose bytes become `path` when the block ends, written the one way into a
    run directory (rank/records.replacing): every directory below `root` (the run directory; by
    default the file's own) entered without following a link, and a link, a named pipe or any
    other non-regular file at `path` refused at once. HpctrainError (exit 2) for those."""
    from ..rank.records import replacing
    try:
        with replacing(str(path), None if root is None else str(root)) as f:
            yield f
    except OSError as exc:
        raise HpctrainError(f"cannot write {path}: {exc.strerror or exc}",
                            fix="remove what is there (hpctrain writes its own file), or give "
                            "another path") from None


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def excerpt(text: str, width: int = 40) -> str:
    """A short, printable excerpt of untrusted text for an error message: control characters
    shown escaped, the rest cut."""
    shown = text[:width].encode("unicode_escape", errors="replace").decode("ascii")
    return repr(shown + ("..." if len(text) > width else ""))


# ----------------------------------------------------------------------------- run.json

_STRINGS = ("run_id", "name", "site", "backend", "site_ref", "scheduler", "library", "script",
            "source", "workdir", "job_id", "state", "reason", "submitted", "pid_start",
            "hpctrain_version", "kind", "submitit_folder")
_COUNTS = {"nodes": (1, MAX_COUNT), "procs_per_node": (1, MAX_PROCS), "ntasks": (1, MAX_COUNT),
           "array_size": (0, MAX_COUNT), "parallel": (0, MAX_COUNT),
           "pid": (0, 4 << 20), "exit_code": (-(1 << 31), 1 << 31)}
_LISTS = ("task_states", "task_values", "after", "jobs")


def _bad(path, key: str, what: str) -> HpctrainError:
    return HpctrainError(f"{path}: '{key}' {what}", fix=f"restore {path} (hpctrain writes it at "
                         "submit), or remove that run directory; its values are never run")


def _control(text: str) -> bool:
    return any(ord(c) < 32 or 0x7f <= ord(c) < 0xa0 or c in "\u2028\u2029" for c in text)


def check_record(rec, path) -> None:
    """Every value of a run.json (rank/records.RunRecord, already type-checked) within its
    bounds and patterns; HpctrainError naming the file and the key."""
    for key in _STRINGS:
        value = getattr(rec, key)
        if value is not None and len(value) > MAX_TEXT:
            raise _bad(path, key, f"is {len(value)} characters long (at most {MAX_TEXT})")
    for key in ("name", "site"):  # the schema's names (a job may be called '-rf': a name, quoted)
        value = getattr(rec, key)
        if value is not None and not (len(value) <= 100 and NAME.fullmatch(value)):
            raise _bad(path, key, f"is {excerpt(value)}, not a name")
    for key in ("run_id", "backend", "scheduler", "library", "kind", "state"):
        value = getattr(rec, key)
        if value is not None and (not value or _control(value) or value.startswith("-")):
            raise _bad(path, key, f"is {excerpt(value)}, not a name")
    if not RUN_ID.fullmatch(rec.run_id):
        raise _bad(path, "run_id", f"is {excerpt(rec.run_id)}, not a run id")
    if rec.job_id is not None and not JOB_ID.fullmatch(rec.job_id):
        raise _bad(path, "job_id", f"is {excerpt(rec.job_id)}, not a job id")
    for key, (lo, hi) in _COUNTS.items():
        value = getattr(rec, key)
        if value is not None and not lo <= value <= hi:
            raise _bad(path, key, f"is {value}, outside {lo}..{hi}")
    for key in _LISTS:
        if len(getattr(rec, key)) > MAX_LIST:
            raise _bad(path, key, f"has more than {MAX_LIST} entries")
    for i, t in enumerate(rec.task_states):
        if not (isinstance(t, list) and len(t) == 3 and isinstance(t[0], str)
                and isinstance(t[1], str) and (t[2] is None or type(t[2]) is int)):
            raise _bad(path, f"task_states[{i}]", "is not [job, state, exit code]")
    for i, v in enumerate(rec.task_values):
        if not isinstance(v, dict):
            raise _bad(path, f"task_values[{i}]", "is not a mapping")
    for i, dep in enumerate(rec.after):
        if not (isinstance(dep, dict) and all(isinstance(dep.get(k), str) for k in
                                              ("mode", "run_id", "job_id", "path"))):
            raise _bad(path, f"after[{i}]", "is not {mode, run_id, job_id, path} (strings)")
        if not JOB_ID.fullmatch(dep["job_id"]):
            raise _bad(path, f"after[{i}].job_id", f"is {excerpt(dep['job_id'])}, not a job id")
    for i, j in enumerate(rec.jobs):
        if not (isinstance(j, str) and JOB_ID.fullmatch(j)):
            raise _bad(path, f"jobs[{i}]", f"is {excerpt(str(j))}, not a job id")
    for key in ("ssh", "remote", "rest"):
        value = rec.extra.get(key)
        if value is not None and not isinstance(value, dict):
            raise _bad(path, key, "is not a mapping")


def where(run_path: Path) -> str:
    return str(Path(run_path) / "run.json")


# ----------------------------------------------------------------------------- job.yaml

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def job_notify_var(run_path: Path) -> str | None:
    """The environment variable a run's resolved job names for its webhook URL (notify.url_from),
    checked; None without one (or a job.yaml that cannot say: notifications are never a reason
    to refuse)."""
    import yaml
    try:
        data = yaml.safe_load(read_regular(Path(run_path) / "job.yaml", MAX_RECORD).decode("utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return None
    notify = data.get("notify") if isinstance(data, dict) else None
    name = notify.get("url_from") if isinstance(notify, dict) else None
    return name if isinstance(name, str) and ENV_NAME.fullmatch(name) else None


def job_doc(run_path: Path) -> dict:
    """A run's resolved job (its job.yaml, as submit wrote it): {} when there is none."""
    import yaml
    path = Path(run_path) / "job.yaml"
    try:
        data = yaml.safe_load(read_regular(path, MAX_RECORD).decode("utf-8")) or {}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise HpctrainError(f"cannot read {path}: {getattr(exc, 'strerror', None) or 'not YAML text'}",
                            fix="restore it (hpctrain writes it at submit) or submit the job "
                            "file again") from None
    return data if isinstance(data, dict) else {}


def job_container_tool(run_path: Path) -> str | None:
    """'podman' or 'docker' when a run's job runs its ranks in a container of that runtime (the
    names hpctrain itself runs: nothing else from the file becomes a command); None otherwise."""
    container = job_doc(run_path).get("container")
    runtime = container.get("runtime") if isinstance(container, dict) else None
    return runtime if runtime in ("podman", "docker") else None


def job_secrets(run_path: Path) -> list[str]:
    """The secret names of a run's resolved job (its job.yaml, as submit wrote it), checked:
    environment variable names, at most 256. `submit --resume` needs them set again."""
    path = Path(run_path) / "job.yaml"
    data = job_doc(run_path)
    names = data.get("secrets")
    if names is None:
        return []
    if not (isinstance(names, list) and len(names) <= 256
            and all(isinstance(n, str) and ENV_NAME.fullmatch(n) for n in names)):
        raise HpctrainError(f"{path}: 'secrets' is not a list of environment variable names",
                            fix="restore it (hpctrain writes it at submit) or submit the job "
                            "file again")
    return list(names)

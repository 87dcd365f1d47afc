"""Slurm's view of a job: the one place that parses squeue, scontrol and sacct output.

Sources, best first: `squeue --json` (Slurm >= 21.08; keeps finished jobs for MinJobAge seconds),
`scontrol -o show job` (any Slurm), `sacct -P` (only where accounting is enabled: it alone
remembers jobs older than MinJobAge). Tested against the real output of Slurm 22.05.8 and
24.11.5 (tests/unit/fixtures/slurm-22.05/, slurm-24.11/). Notes on 22.05:
- `squeue --json --jobs=X` ignores the filter and returns every job: we filter ourselves.
- squeue's `exit_code` is the raw wait status (3 << 8 for `exit 3`); scontrol's is "3:0".
- A pending array prints one record for all its pending tasks ("1-3%1"); a pending task that is
  cancelled vanishes from every record.
Notes on 24.11 (`squeue --json` is data_parser v0.0.42 there, 22.05's is openapi v0.0.38):
- numbers are objects, {"set": true, "infinite": false, "number": 5} (unset: "set": false);
- `job_state` is a list, the base state first, then flags: ["PENDING", "REQUEUED"];
- `exit_code` is {"status": [...], "return_code": {...}, "signal": {"id": {...}, "name": ...}};
- `--jobs=X` is honoured.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass


@dataclass
class Record:
    """One Slurm job record: a plain job, one array task, or an array's pending remainder."""
    job_id: str  # Slurm's own id of this record
    array_job_id: str | None = None
    task: int | None = None  # this record's array index
    pending_tasks: tuple[int, ...] = ()  # the array's tasks this (pending) record stands for
    state: str = "UNKNOWN"
    reason: str | None = None
    exit_code: int | None = None  # the shell's view: 0-255, 128+N for a signal
    nodes: str | None = None
    node_count: int | None = None
    start: float | None = None  # epoch seconds
    end: float | None = None
    restarts: int = 0
    stdout: str | None = None  # its output file: names the run directory it belongs to
    dependency: str | None = None  # Slurm's own text: afterok:12(unfulfilled), afterok:12(failed)
    # What a pending job's wait is explained with (pending.py): where it queues, under what.
    partition: str | None = None
    qos: str | None = None
    user: str | None = None
    reservation: str | None = None  # the reservation it asked for

    @property
    def name(self) -> str:
        """How Slurm names it to users: 1234, 1234_5, 1234_[1-3%1]."""
        if self.array_job_id and self.task is not None:
            return f"{self.array_job_id}_{self.task}"
        if self.array_job_id and self.pending_tasks:
            return f"{self.array_job_id}_[{compress(self.pending_tasks)}]"
        return self.job_id

    def elapsed(self, now: float | None = None) -> int | None:
        if not self.start or self.state == "PENDING":
            return None
        end = self.end if self.end and self.state not in ("RUNNING", "COMPLETING") else (now or time.time())
        return max(0, int(end - self.start))


MAX_JOB_ID = (1 << 63) - 1
MAX_TASKS = 100_000  # indices of one array expression (runs/untrusted.py's bound on array_size)
# Indices of all the array expressions of one answer together: a few bytes of expression stand
# for MAX_TASKS numbers, so an answer of many pending arrays would otherwise cost seconds per
# megabyte. Real queues hold far fewer pending tasks (Slurm's MaxArraySize defaults to 1001).
MAX_PENDING = 10 * MAX_TASKS
_TASK_PART = re.compile(r"([0-9]{1,9})(?:-([0-9]{1,9}))?(?::([1-9][0-9]{0,8}))?")


def expand_tasks(text: str, limit: int = MAX_TASKS) -> tuple[int, ...]:
    """Slurm's array index expression ("0-3%2", "1,4-6", "0-10:2") -> the indices; () for text
    that is not one, and at most `limit` (MAX_TASKS) of them (the tool's output is untrusted)."""
    limit = min(limit, MAX_TASKS)
    text = str(text).split("%", 1)[0].strip("[]")
    out: list[int] = []
    for part in filter(None, text.split(",")):
        if len(out) >= limit:
            break
        m = _TASK_PART.fullmatch(part)
        if m is None:
            return ()
        lo, hi, step = int(m.group(1)), int(m.group(2) or m.group(1)), int(m.group(3) or 1)
        out.extend(range(lo, min(hi, lo + step * (limit - len(out) - 1)) + 1, step))
    return tuple(out[:limit])


def compress(tasks) -> str:
    tasks = sorted(tasks)
    parts, i = [], 0
    while i < len(tasks):
        j = i
        while j + 1 < len(tasks) and tasks[j + 1] == tasks[j] + 1:
            j += 1
        parts.append(str(tasks[i]) if i == j else f"{tasks[i]}-{tasks[j]}")
        i = j + 1
    return ",".join(parts)


def _wait_status(raw: int | None) -> int | None:
    """A raw wait status as the shell reports it: exit N -> N, killed by signal S -> 128+S."""
    raw = _count(raw, 1 << 31)
    if raw is None:
        return None
    sig = raw & 0x7F
    return 128 + sig if sig else (raw >> 8) & 0xFF


def _none(value) -> str | None:
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        return None  # a mapping or a list where Slurm writes text: not what this parser knows
    return None if value in ("", "None", "(null)") else str(value)[:100_000]


def _count(value, hi: int) -> int | None:
    """A whole number 0..hi from the tool's output, or None."""
    return value if type(value) is int and 0 <= value <= hi else None


def _n(value):
    """A number as 24.11 writes it ({"set", "infinite", "number"}): the number when set and
    finite, else None; any other value (22.05's plain numbers) as it is."""
    if isinstance(value, dict) and "number" in value:
        ok = value.get("set") is True and value.get("infinite") is not True
        return value["number"] if ok else None
    return value


def _job_state(value) -> str | None:
    """22.05: "PENDING"; 24.11: ["PENDING", "REQUEUED"] (the base state first, then flags)."""
    if isinstance(value, list):
        value = value[0] if value else None
    return _none(value)


def _exit_code(value) -> int | None:
    """22.05: the raw wait status; 24.11: {"return_code": {...}, "signal": {"id": {...}}}."""
    if not isinstance(value, dict):
        return _wait_status(value)
    signal = value.get("signal")
    sig = _count(_n(signal.get("id")), 127) if isinstance(signal, dict) else None
    if sig:
        return 128 + sig
    return _count(_n(value.get("return_code")), 255)


def _epoch(value) -> float | None:
    """Epoch seconds (0: Slurm's "not yet"), or None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e11
    return float(value) if ok else None


# ----------------------------------------------------------------------------- squeue --json

def squeue_errors(text: str) -> list[str]:
    """What `squeue --json` reports in its "errors" list (it exits 0 even when it could not
    reach the controller: "slurm_load_jobs: Unable to contact slurm controller")."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return ["squeue --json printed no JSON"]
    if not isinstance(data, dict) or not isinstance(data.get("jobs", []), list):
        return ["squeue --json printed JSON without a list of jobs"]
    errors = data.get("errors") or []
    out = []
    for e in errors if isinstance(errors, list) else [errors]:
        if isinstance(e, dict):
            parts = [str(e.get(k)) for k in ("source", "description", "error") if e.get(k)]
            out.append(": ".join(parts) or str(e))
        else:
            out.append(str(e))
    return out


def parse_squeue_json(text: str) -> list[Record]:
    """`squeue --json`'s jobs (checked by squeue_errors first)."""
    return job_records(json.loads(text).get("jobs", []))


def job_records(jobs: list) -> list[Record]:
    """Job records as `squeue --json` and slurmrestd's jobs list write them, in either release's
    shape; a record without a job id or with values of another shape than Slurm writes is left
    out, a value is bounded, and the pending arrays' indices all together too (MAX_PENDING)."""
    out, pending_left = [], MAX_PENDING
    for j in jobs:
        job_id = _count(_n(j.get("job_id")), MAX_JOB_ID) if isinstance(j, dict) else None
        if job_id is None:
            continue
        array = _count(_n(j.get("array_job_id")), MAX_JOB_ID) or 0
        task = _count(_n(j.get("array_task_id")), MAX_JOB_ID)
        pending = expand_tasks(j["array_task_string"], pending_left) if array and task is None \
            and isinstance(j.get("array_task_string"), str) else ()
        pending_left -= len(pending)
        out.append(Record(
            job_id=str(job_id), array_job_id=str(array) if array else None, task=task,
            pending_tasks=pending, state=_job_state(j.get("job_state")) or "UNKNOWN",
            reason=_none(j.get("state_reason")), exit_code=_exit_code(j.get("exit_code")),
            nodes=_none(j.get("nodes")), node_count=_count(_n(j.get("node_count")), MAX_JOB_ID),
            start=_epoch(_n(j.get("start_time"))), end=_epoch(_n(j.get("end_time"))),
            restarts=_count(_n(j.get("restart_cnt")), MAX_JOB_ID) or 0,
            stdout=_none(j.get("standard_output")),
            dependency=_none(j.get("dependency")), partition=_none(j.get("partition")),
            qos=_none(j.get("qos")), user=_none(j.get("user_name")),
            reservation=_none(j.get("resv_name"))))
    return out


# ----------------------------------------------------------------------------- scontrol -o

def parse_scontrol_line(line: str) -> dict[str, str]:
    """One `scontrol -o show job` line -> Key: Value. Values hold no spaces except in a few
    fields we do not read (Command, WorkDir, Comment come late and are split harmlessly)."""
    out: dict[str, str] = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep and key not in out:
            out[key] = value
    return out


def _scontrol_time(text: str | None) -> float | None:
    if not text or text in ("Unknown", "None", "N/A"):
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def _digits(text: str) -> int | None:
    """A count the tool wrote as ASCII digits (str.isdigit also takes '²' and other scripts'
    digits, which int() refuses), bounded; else None."""
    return int(text) if re.fullmatch(r"[0-9]{1,12}", text or "") else None


def _exit_pair(text: str | None) -> int | None:
    """scontrol/sacct "status:signal" -> the shell's view."""
    if not text:
        return None
    status, _, sig = text.partition(":")
    if _digits(sig):
        return 128 + min(_digits(sig), 127)
    return _digits(status)


def parse_scontrol(text: str) -> list[Record]:
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        f = parse_scontrol_line(line)
        array = _none(f.get("ArrayJobId"))
        task_text = f.get("ArrayTaskId", "")
        task = _digits(task_text)
        pending = expand_tasks(task_text) if array and task is None and task_text else ()
        out.append(Record(
            job_id=f.get("JobId", "?"), array_job_id=array, task=task, pending_tasks=pending,
            state=f.get("JobState", "UNKNOWN"), reason=_none(f.get("Reason")),
            exit_code=_exit_pair(f.get("ExitCode")), nodes=_none(f.get("NodeList")),
            node_count=_digits(f.get("NumNodes", "").split("-")[0]),
            start=_scontrol_time(f.get("StartTime")), end=_scontrol_time(f.get("EndTime")),
            restarts=_digits(f.get("Restarts", "")) or 0, stdout=_none(f.get("StdOut")),
            dependency=_none(f.get("Dependency")), partition=_none(f.get("Partition")),
            qos=_none(f.get("QOS")), user=_none(f.get("UserId", "").split("(")[0]),
            reservation=_none(f.get("Reservation"))))
    return out


# ----------------------------------------------------------------------------- sacct -P

SACCT_FIELDS = "JobID,State,ExitCode,NodeList,NNodes,Start,End,Reason"


def parse_sacct(text: str) -> list[Record]:
    """`sacct -X -P -n -o SACCT_FIELDS` lines: "1234_5|COMPLETED|0:0|node1|1|2024-…|…|None"."""
    out = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 8:
            continue
        jid, state, code, nodes, nn, start, end, reason = parts[:8]
        base, _, task = jid.partition("_")
        rec = Record(job_id=jid, state=state.split()[0] if state else "UNKNOWN",
                     reason=_none(reason), exit_code=_exit_pair(code),
                     nodes=_none(nodes) if nodes != "None assigned" else None,
                     node_count=_digits(nn),
                     start=_scontrol_time(start), end=_scontrol_time(end))
        if _digits(task) is not None:
            rec.array_job_id, rec.task = base, _digits(task)
        elif task:
            rec.array_job_id, rec.pending_tasks = base, expand_tasks(task)
        out.append(rec)
    return out


# ----------------------------------------------------------------------------- filtering

def belongs(rec: Record, job_id: str) -> bool:
    return rec.job_id == job_id or rec.array_job_id == job_id

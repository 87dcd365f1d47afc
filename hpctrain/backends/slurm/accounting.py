"""What sacct says each attempt of a job cost, for `hpctrain report` (follow/report.py).

A requeued job (preemption, `scontrol requeue`, a node failure) keeps its id; Slurm's database
keeps one record per attempt, and `sacct --duplicates` lists them all (without it, only the
last). Each allocation line is followed by its steps' lines; the attempts of one id, in order of
their start, are its SLURM_RESTART_COUNT 0, 1, ... An array task is asked for by its raw id (its
own SLURM_JOB_ID) or as ARRAY_TASK; its lines carry both.

sacct's output is a tool's output, so untrusted: at most MAX_BYTES read, each field checked
against what it may hold, lines that do not fit skipped. Times are asked as epoch seconds
(SLURM_TIME_FORMAT=%s: no time zone to guess, here or on a login node). None where the cluster
keeps no accounting (AccountingStorageType none)."""
from __future__ import annotations

import re

from .. import commands

FIELDS = ("JobIDRaw", "JobID", "State", "Submit", "Start", "End", "ElapsedRaw", "AllocTRES",
          "AllocCPUS", "TotalCPU", "MaxRSS")
MAX_IDS = 256  # job ids asked at once
MAX_BYTES = 8 << 20  # of sacct's output read
MAX_ATTEMPTS = 1000  # per job id
_ID = re.compile(r"[0-9]{1,20}(?:_[0-9]{1,10})?")
_RAW = re.compile(r"([0-9]{1,20})(?:\.([A-Za-z0-9+_-]{1,40}))?")
_JOBID = re.compile(r"[0-9]{1,20}(?:_(?:[0-9]{1,10}|\[[0-9,%-]{1,200}\]))?(?:\.[A-Za-z0-9+_-]{1,40})?")
_STATE = re.compile(r"[A-Z_]{1,40}")


def _seconds(text: str) -> float | None:
    """sacct's TotalCPU / Elapsed: [D-]HH:MM:SS[.mmm] or MM:SS.mmm."""
    m = re.fullmatch(r"(?:([0-9]{1,6})-)?(?:([0-9]{1,9}):)?([0-9]{1,9}):([0-9]{1,9}(?:\.[0-9]{1,9})?)",
                     text.strip())
    if not m:
        return None
    d, h, mi, s = m.groups()
    return int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi) * 60 + float(s)


def _mib(text: str) -> float | None:
    m = re.fullmatch(r"([0-9]{1,15}(?:\.[0-9]{1,9})?)([KMGTP]?)", text.strip())
    if not m:
        return None
    scale = {"": 1 / 1048576, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1 << 20, "P": 1 << 30}
    return float(m.group(1)) * scale[m.group(2)]


def _epoch(text: str) -> float | None:
    """A time printed with SLURM_TIME_FORMAT=%s; None for Unknown/None (not started, running)."""
    return float(text) if re.fullmatch(r"[0-9]{9,11}", text) else None


def _count(text: str) -> int | None:
    return int(text) if re.fullmatch(r"[0-9]{1,9}", text) else None


def _gpus(tres: str) -> int:
    """GPUs in AllocTRES (`billing=8,cpu=8,gres/gpu=8,node=2`; typed too: gres/gpu:h100=8 —
    counted once, the untyped total when both are there)."""
    plain = re.search(r"(?:^|,)gres/gpu=([0-9]{1,9})(?:,|$)", tres)
    if plain:
        return int(plain.group(1))
    return sum(int(n) for n in re.findall(r"(?:^|,)gres/gpu:[A-Za-z0-9_.-]{1,64}=([0-9]{1,9})(?=,|$)", tres))


def parse(text: str, since: float | None = None) -> list[dict]:
    """`sacct -n -P --duplicates -o FIELDS` (times as epochs) -> one dict per attempt, ordered
    by job id and start: {job_id (raw), array_id ("1234_5" or None), attempt, state, submit,
    start, end, elapsed_s, gpus, cpus, total_cpu_s, max_rss_mib}. Allocations submitted before
    `since` (an earlier job that had the same id: ids restart when a cluster's state is reset)
    are left out, and so are their steps."""
    allocations: list[dict] = []
    current: dict | None = None
    for line in text[:MAX_BYTES].splitlines():
        parts = line.split("|")
        if len(parts) != len(FIELDS):
            continue
        raw, jobid, state, submit, start, end, elapsed, tres, cpus, total, rss = parts
        m = _RAW.fullmatch(raw)
        if not m or not _JOBID.fullmatch(jobid):
            current = None if not m else current
            continue
        if m.group(2) is None:  # the allocation itself: an attempt
            word = state.split(" ")[0]  # "CANCELLED by 0"
            current = {
                "job_id": m.group(1), "array_id": jobid if "_" in jobid and "[" not in jobid else None,
                "state": word if _STATE.fullmatch(word) else "UNKNOWN", "submit": _epoch(submit),
                "start": _epoch(start), "end": _epoch(end), "elapsed_s": float(_count(elapsed) or 0),
                "gpus": _gpus(tres), "cpus": _count(cpus), "total_cpu_s": _seconds(total),
                "max_rss_mib": None}
            if since is not None and current["submit"] is not None and current["submit"] < since:
                current = None  # not this run's job: its steps go with it
                continue
            allocations.append(current)
        elif current is not None and current["job_id"] == m.group(1):
            rss_mib = _mib(rss) if rss else None
            if rss_mib is not None:
                current["max_rss_mib"] = max(current["max_rss_mib"] or 0.0, rss_mib)
    by_job: dict[str, list[dict]] = {}
    for a in allocations:
        if a["start"] is not None:  # an attempt that never started cost nothing
            by_job.setdefault(a["job_id"], []).append(a)
    out = []
    for job in sorted(by_job, key=int):
        for i, a in enumerate(sorted(by_job[job], key=lambda a: a["start"])[:MAX_ATTEMPTS]):
            out.append(dict(a, attempt=i))
    return out


def accounting(job_ids: list[str], since: float | None = None) -> list[dict] | None:
    """Every attempt of these jobs (raw ids or ARRAY_TASK) that sacct knows (parse()), or None
    where it cannot answer (no sacct, no accounting storage)."""
    ids = sorted({j for j in job_ids if _ID.fullmatch(j)})[:MAX_IDS]
    if not ids or not accounting_enabled():
        return None
    try:
        out = commands.run(["env", "SLURM_TIME_FORMAT=%s", "sacct", "-n", "-P", "--duplicates",
                            "-j", ",".join(ids), "-o", ",".join(FIELDS)], timeout=30)
    except commands.SchedulerError:
        return None
    return parse(out, since)


_enabled: dict = {}  # by where the tools run (here: None, or a login node's key)


def accounting_enabled() -> bool:
    """Whether sacct can answer (AccountingStorageType is not accounting_storage/none); asked
    once per process and cluster, and only when squeue no longer knows a job."""
    login = commands.where()
    key = getattr(login, "key", None)
    if key not in _enabled:
        try:
            text = commands.run(["scontrol", "show", "config"])
        except commands.SchedulerError:
            return False
        line = next((ln for ln in text.splitlines() if ln.startswith("AccountingStorageType")), "")
        _enabled[key] = bool(line) and "accounting_storage/none" not in line
    return _enabled[key]

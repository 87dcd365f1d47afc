"""What sacct says a job cost, for `hpctrain report` (follow/report.py): per job id its GPUs
(AllocTRES), elapsed seconds, CPUs, total CPU time and the largest MaxRSS of its steps. None
where the cluster keeps no accounting (AccountingStorageType none: the local test cluster)."""
from __future__ import annotations

import re

from .. import commands


def _seconds(text: str) -> float | None:
    """sacct's TotalCPU / Elapsed: [D-]HH:MM:SS[.mmm] or MM:SS.mmm."""
    m = re.fullmatch(r"(?:([0-9]{1,6})-)?(?:([0-9]{1,9}):)?([0-9]{1,9}):([0-9]{1,9}(?:\.[0-9]{1,9})?)",
                     text.strip())
    if not m:
        return None
    d, h, mi, s = m.groups()
    return int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi) * 60 + float(s)


def _mib(text: str) -> float | None:
    m = re.fullmatch(r"([0-9]{1,15}(?:\.[0-9]{1,9})?)([KMGT]?)", text.strip())
    if not m:
        return None
    return float(m.group(1)) * {"": 1 / 1048576, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1 << 20}[m.group(2)]


def accounting(job_ids: list[str]) -> dict[str, dict] | None:
    """job id -> {gpus, elapsed_s, cpus, total_cpu_s, max_rss_mib} from `sacct`, or None where
    it cannot answer (no sacct, no accounting storage: the local test cluster has none)."""
    ids = [j for j in job_ids if re.fullmatch(r"[0-9]{1,20}", j)]
    if not ids or not accounting_enabled():
        return None
    try:
        out = commands.run(["sacct", "-n", "-P", "-j", ",".join(ids), "-o",
                            "JobID,AllocTRES,ElapsedRaw,AllocCPUS,TotalCPU,MaxRSS"], timeout=30)
    except commands.SchedulerError:
        return None
    found: dict[str, dict] = {}
    for line in out.splitlines()[:10000]:
        parts = line.split("|")
        if len(parts) != 6:
            continue
        job, tres, elapsed, cpus, total, rss = parts
        base = job.split(".")[0]
        entry = found.setdefault(base, {"max_rss_mib": None})
        if "." not in job:  # the allocation itself
            # Bounded counts (sacct's output is untrusted text): a longer number is not one.
            gpus = re.search(r"gres/gpu=([0-9]{1,7})(?![0-9])", tres)
            entry.update(gpus=int(gpus.group(1)) if gpus else 0,
                         elapsed_s=float(elapsed) if re.fullmatch(r"[0-9]{1,11}", elapsed) else None,
                         cpus=int(cpus) if re.fullmatch(r"[0-9]{1,8}", cpus) else None,
                         total_cpu_s=_seconds(total))
        rss_mib = _mib(rss) if rss else None
        if rss_mib is not None:
            entry["max_rss_mib"] = max(entry["max_rss_mib"] or 0.0, rss_mib)
    return {k: v for k, v in found.items() if "elapsed_s" in v} or None


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

"""How far a run's training got: its ranks' progress reports summed up per run (or sweep task).

The ranks write status/progress-R.json (rank/progress.report, called by the library hooks or by
the program itself); records.read_progress is the one reader. This module turns those into what
`status`, `list` and `submit --wait` show, and what `--json` carries: per task the step (rank 0's,
and the slowest rank's), its rate, the newest value of the main metric, when the run last moved
and which attempt (Slurm requeue) it is in — and per rank the same.

Reading progress costs a directory listing and one small file per rank: no scheduler query.
"""
from __future__ import annotations

import os
import time

import msgspec

from ..rank.records import Progress, read_identities, read_progress

# The names a report's main metric goes by, in order of preference: the library hooks report
# the library's own mean return/reward; a program may name it as it likes.
MAIN_METRICS = ("reward", "return", "mean_reward", "mean_return", "episode_reward",
                "episode_return", "score")


class RankProgress(msgspec.Struct, kw_only=True):
    rank: int
    node: str | None  # from status/rank-R.json, when the rank recorded it
    step: int
    rate: float | None  # steps per second since this attempt's first report
    metrics: dict[str, float | None]  # None: NaN or infinite (rank/records.py)
    time: float  # when the rank reported (epoch seconds)
    age_s: float  # seconds since then, when the status was taken
    attempt: int  # SLURM_RESTART_COUNT of the report
    since: float = 0.0  # the rank's first report of that attempt: its rate's window starts there


class TrainingProgress(msgspec.Struct, kw_only=True):
    task: int | None  # a sweep's task; None: the run itself
    step: int  # rank 0's step (the lowest rank that reports in the newest attempt)
    min_step: int  # the slowest rank's step
    rate: float | None
    metric: str | None  # the main metric's name
    value: float | None  # its newest value
    metrics: dict[str, float | None]  # rank 0's newest values
    time: float  # the newest report of any rank: when the run last moved
    age_s: float
    attempt: int  # the newest attempt that reported
    ranks: list[RankProgress] = []


def main_metric(metrics: dict) -> str | None:
    """The metric that says whether the run learns: a reward or return if there is one."""
    for name in MAIN_METRICS:
        if name in metrics:
            return name
    for name in sorted(metrics):
        if "reward" in name.lower() or "return" in name.lower():
            return name
    return min(metrics) if metrics else None


def summarize(reports: list[Progress], nodes: dict[int, str] | None = None,
              task: int | None = None, now: float | None = None) -> TrainingProgress | None:
    """One task's progress from its ranks' reports; None when no rank has reported yet.
    Reports of an earlier attempt (before a requeue) are listed per rank but not summed."""
    if not reports:
        return None
    now = time.time() if now is None else now
    nodes = nodes or {}
    ranks = [RankProgress(rank=p.rank, node=nodes.get(p.rank), step=p.step, rate=p.rate,
                          metrics=dict(p.metrics), time=p.time, age_s=max(0.0, now - p.time),
                          attempt=p.attempt, since=p.since)
             for p in sorted(reports, key=lambda p: p.rank)]
    attempt = max(r.attempt for r in ranks)
    current = [r for r in ranks if r.attempt == attempt]
    lead = current[0]
    metric = main_metric(lead.metrics)
    newest = max(r.time for r in current)
    return TrainingProgress(task=task, step=lead.step, min_step=min(r.step for r in current),
                            rate=lead.rate, metric=metric,
                            value=lead.metrics.get(metric) if metric else None,
                            metrics=lead.metrics, time=newest, age_s=max(0.0, now - newest),
                            attempt=attempt, ranks=ranks)


def of_directory(directory: str, task: int | None = None,
                 now: float | None = None) -> TrainingProgress | None:
    nodes = {ident.rank: ident.node for ident in read_identities(directory)}
    return summarize(read_progress(directory), nodes, task, now)


def of_run(run_dir: str, array_size: int | None = None,
           now: float | None = None) -> list[TrainingProgress]:
    """The run's progress, or each sweep task's that has reported, by task."""
    now = time.time() if now is None else now
    if not array_size:
        found = of_directory(run_dir, None, now)
        return [found] if found else []
    out = []
    for task in range(array_size):
        found = of_directory(os.path.join(run_dir, "tasks", str(task)), task, now)
        if found:
            out.append(found)
    return out

"""Slow ranks (issue 29): a rank whose progress rate stays below a share of the ranks' median — a
throttled GPU, a bad link, a noisy neighbour — is named with its node.

The rate each rank reports (rank/progress.py) is steps per second since its first report of the
attempt, so it is already an average over its whole window; a rank is judged once that window
(`since` to its newest report) covers health.slow_rank_window seconds, and against the median of
the ranks of the same attempt whose window does too. With fewer than two such ranks nothing is
judged.

At the end of each attempt the batch shell runs `rank slow RUN_DIR MAX_EXCLUDED`
(parts/launch.sh.j2): the verdict goes to status/slow.json and the job's log, and with
health.exclude_slow_nodes the slow ranks' nodes join status/excluded.json (within
preemption.max_excluded_nodes), so that the next requeue, after a failure or a preemption,
leaves them out. `status` judges the same way from the reports as they are.
"""
from __future__ import annotations

import os
import statistics
from types import SimpleNamespace

from ..printable import printable
from ..records import ExcludedNode, bootstrap_section, now, read_excluded, read_identities, \
    read_progress, write_excluded, write_json


def settings(run_dir: str) -> dict | None:
    """bootstrap.json's "slow_ranks" {factor, window, exclude}, or None: not judged."""
    cfg = bootstrap_section(run_dir, "slow_ranks")
    if cfg is None:
        return None
    factor, window = cfg.get("factor"), cfg.get("window")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (factor, window)):
        return None
    if not 0 < factor < 1 or window <= 0:
        return None
    return {"factor": float(factor), "window": float(window), "exclude": cfg.get("exclude") is True}


def find(ranks: list, factor: float, window: float) -> list[dict]:
    """The slow ones among `ranks` (objects with rank, node, rate, time, since, attempt): each
    {rank, node, rate, median, ratio, window_s}, slowest first."""
    if not ranks:
        return []
    attempt = max(r.attempt for r in ranks)
    judged = [r for r in ranks if r.attempt == attempt and r.rate and r.rate > 0 and r.since
              and r.time - r.since >= window]
    if len(judged) < 2:
        return []
    median = statistics.median(r.rate for r in judged)
    out = [{"rank": r.rank, "node": r.node, "rate": r.rate, "median": median,
            "ratio": round(r.rate / median, 3), "window_s": round(r.time - r.since, 1)}
           for r in judged if r.rate < factor * median]
    return sorted(out, key=lambda s: s["ratio"])


def describe(slow: dict) -> str:
    return (f"rank {slow['rank']} on {slow['node'] or '?'}: {slow['rate']:.3g} steps/s, "
            f"{slow['ratio']:.2f}x the median {slow['median']:.3g}/s over {slow['window_s']:g} s")


def verdict(run_dir: str, max_excluded: int) -> int:
    """The end of an attempt: write status/slow.json, say each slow rank, and with exclude on
    record their nodes in status/excluded.json. Prints the nodes excluded now, or nothing."""
    cfg = settings(run_dir)
    if cfg is None:
        return 0
    nodes = {i.rank: i.node for i in read_identities(run_dir)}
    reports = [SimpleNamespace(rank=p.rank, node=nodes.get(p.rank), rate=p.rate, time=p.time,
                               since=p.since, attempt=p.attempt) for p in read_progress(run_dir)]
    slow = find(reports, cfg["factor"], cfg["window"])
    try:
        write_json(os.path.join(run_dir, "status", "slow.json"),
                   {"time": now(), "factor": cfg["factor"], "window": cfg["window"],
                    "job_id": os.environ.get("HPCTRAIN_JOB_ID"), "ranks": slow}, root=run_dir)
    except OSError:
        pass
    for s in slow:
        print(f"slow rank: {printable(describe(s))}", flush=True)  # a node's name: outside text
    if not (cfg["exclude"] and slow):
        return 0
    excluded = read_excluded(run_dir)
    names = [e.node for e in excluded]
    room = max(0, max_excluded - len(names))
    new = [n for n in dict.fromkeys(s["node"] for s in slow) if n and n not in names][:room]
    for node in new:
        s = next(s for s in slow if s["node"] == node)
        excluded.append(ExcludedNode(node=node, reason="slow", message=describe(s),
                                     time=now(), job_id=os.environ.get("HPCTRAIN_JOB_ID")))
    if new:
        write_excluded(run_dir, excluded)
        print(f"exclude {','.join(new)}", flush=True)
    return 0

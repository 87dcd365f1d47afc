"""How a study is shown on a terminal (`status STUDY`, `report STUDY`) and as JSON.

Everything here came from the journal (checked in follow.py) or the scheduler: each text leaves
through rank/printable.shown like the rest of what hpctrain prints, and JSON is written ASCII
only with NaN as null (json escapes every control character).
"""
from __future__ import annotations

import json

import msgspec

from ..rank.printable import shown
from .follow import StudyReport, StudyStatus, TrialRow


SHOWN_TRIALS = 1000  # trial lines on a terminal: the newest; --json has every one


def num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def params_text(params: dict) -> str:
    return " ".join(f"{k}={num(v) if isinstance(v, float) else v}" for k, v in params.items())


def _counts(st: StudyStatus) -> str:
    words = {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "failed", "RUNNING": "running",
             "WAITING": "waiting"}
    return ", ".join(f"{st.counts[s]} {w}" for s, w in words.items() if st.counts.get(s))


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def trial_line(r: TrialRow, widths: tuple[int, int]) -> str:
    latest = "-" if r.latest is None else f"{r.latest:.4g}@{r.latest_step}"
    where = "-" if r.worker is None else f"w{r.worker}"
    if r.nodes:
        where += f" {r.nodes}"
    end = {"PRUNED": f"pruned at {r.pruned_step}" if r.pruned_step is not None else "pruned",
           "FAIL": f"failed: {r.fail_cause}" if r.fail_cause else "failed"}.get(r.state, "")
    cells = (f"{r.number:>4}  {r.state:<8}  {num(r.value):>9}  {num(r.best):>9}  "
             f"{latest:>{widths[0]}}  {duration(r.seconds):>8}  {where:<{widths[1]}}  ")
    return cells + "  ".join(p for p in (params_text(r.params), end) if p)


def format_study(st: StudyStatus, workers: str | None = None) -> str:
    """A study's page: its workers' state (the scheduler's, from follow/), what it searches for,
    the trials so far, the best, and one line per trial."""
    total = st.n_trials if st.n_trials is not None else "?"
    lines = [f"study     {st.name} ({st.run_id})"]
    if workers:
        lines.append(f"workers   {workers}" + (f" ({st.parallel} at once)" if st.parallel else ""))
    lines.append(f"metric    {st.metric or 'the ranks main metric'} ({st.direction})")
    lines.append(f"trials    {len(st.trials)} of {total}" + (f": {_counts(st)}" if st.counts else "")
                 + (f"; {st.left} left" if st.left is not None else ""))
    if st.best is not None:
        lines.append(f"best      #{st.best.number}  {num(st.best.value)}  {params_text(st.best.params)}")
    else:
        lines.append("best      - (no trial has completed yet)")
    if st.stopped:
        lines.append(f"stopped   {st.stopped}")
    lines.append(f"directory {st.path}")
    lines.append(f"dashboard optuna-dashboard {st.journal}")
    shown_rows = st.trials[-SHOWN_TRIALS:]
    if st.trials:
        latest_w = max([len("latest@step")] + [len(f"{r.latest:.4g}@{r.latest_step}")
                                                for r in shown_rows if r.latest is not None])
        where_w = max([len("where")] + [len(("-" if r.worker is None else f"w{r.worker}")
                                            + (f" {r.nodes}" if r.nodes else "")) for r in shown_rows])
        lines.append("")
        lines.append(f"{'#':>4}  {'state':<8}  {'value':>9}  {'best':>9}  {'latest@step':>{latest_w}}  "
                     f"{'time':>8}  {'where':<{where_w}}  params")
        if len(st.trials) > len(shown_rows):
            lines.append(f"  ... {len(st.trials) - len(shown_rows)} earlier trial(s) not shown "
                         "(status --json lists every one)")
        lines += [trial_line(r, (latest_w, where_w)) for r in shown_rows]
    return shown("\n".join(lines))


def format_report(r: StudyReport) -> str:
    shape = f"{r.nodes} node(s) x {r.gpus_per_node} GPU(s)"
    lines = [f"study {r.name} ({r.run_id}): each trial {shape}",
             f"  GPU-hours {r.gpu_hours:.3f}, node-hours {r.node_hours:.3f} over "
             f"{len(r.trials)} trial(s)"]
    for c in r.trials:
        gpu = "-" if c.gpu_hours is None else f"{c.gpu_hours:.3f}"
        node = "-" if c.node_hours is None else f"{c.node_hours:.3f}"
        lines.append(f"  trial {c.number:>4} {c.state:<8} {duration(c.seconds):>8}  {gpu} GPU-h "
                     f"[{c.source}], {node} node-h")
    if r.saved_gpu_hours is not None:
        lines.append(f"  pruning saved ~{r.saved_gpu_hours:.3f} GPU-hours ({r.saved_node_hours:.3f} "
                     f"node-hours): {r.pruned} pruned trial(s), each against the mean completed "
                     f"trial ({duration(r.mean_complete_s)})")
    elif r.pruned:
        lines.append(f"  pruning: {r.pruned} pruned trial(s); no completed trial yet to "
                     "measure what that saved")
    return shown("\n".join(lines))


def as_json(obj) -> str:
    """ASCII JSON; a non-finite number (none should reach here) as null."""
    return json.dumps(json.loads(msgspec.json.encode(obj)), indent=2)

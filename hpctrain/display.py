"""How runs are shown on a terminal: one phrase for a state, a run's page, a table of runs."""
from __future__ import annotations

from .backends import JobState, State
from .status import RunStatus


def describe(state: JobState) -> str:
    """One phrase: 'PENDING (Resources)', 'FAILED exit 3', 'RUNNING 00:01:02 on node[1-2]'."""
    s = state.state
    if state.reason and (s in (State.PENDING, State.REQUEUED, State.UNKNOWN)
                         or state.reason.startswith("cannot reach")):
        return f"{s.value} ({state.reason})"
    parts = [s.value]
    if state.done and state.exit_code not in (None, 0):
        parts.append(f"exit {state.exit_code}")
    if state.restarts:
        parts.append(f"requeued {state.restarts}x")
    if state.elapsed:
        parts.append(state.elapsed)
    if state.nodes and not state.done:
        parts.append(f"on {state.nodes}")
    return " ".join(parts)


def counts_line(state: JobState) -> str:
    counts = state.counts
    return ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items()))


def format_status(st: RunStatus) -> str:
    s = st.state
    lines = [
        f"run       {st.run_id}",
        f"job name  {st.name[:50]} on {st.site[:18]}",
        f"job       {st.job}" + (f"  array of {len(s.tasks)}" if s.tasks else ""),
        f"state     {describe(s)}",
    ]
    if s.tasks:
        lines.append(f"tasks     {counts_line(s)}")
    lines.append(f"shape     {st.nodes} node(s) x {st.ranks_per_node} rank(s)")
    if s.nodes:
        lines.append(f"nodes     {s.nodes}")
    if s.elapsed and not s.tasks:
        lines.append(f"elapsed   {s.elapsed}")
    if st.submitted:
        lines.append(f"submitted {st.submitted}")
    lines.append(f"directory {st.path}")
    if s.tasks:
        lines.append("")
        lines.append(f"{'task':<12} {'state':<34} values")
        for i, t in enumerate(s.tasks):
            values = " ".join(f"{k}={v}" for k, v in (st.task_values[i] if i < len(st.task_values) else {}).items())
            lines.append(f"{(t.job or str(i))[:12]:<12} {describe(t)[:34]:<34} {values}"[:79])
    if st.ended:
        lines.append(f"ended     {st.ended}")
    if st.failures:
        lines.append("")
        lines.append("failed ranks:")
        for f in st.failures:
            where = f"task {f['task']} " if f["task"] is not None else ""
            lines.append(f"  {where}rank {f['rank']} on {f['node']} exit {f['exit_status']}: "
                         f"{f['error']}")
    return "\n".join(lines)


def format_table(rows: list[RunStatus]) -> str:
    """An 80-column table of runs, newest first."""
    lines = [f"{'NAME':<10} {'RUN':<20} {'JOB':<11} {'SITE':<8} {'STATE':<9} {'SUBMITTED':<11} NxR"]
    for r in rows:
        when = (r.submitted or "")[5:16].replace("T", " ")
        state = r.state.state.value + (f"({r.state.exit_code})" if r.state.done and r.state.exit_code else "")
        shape = f"{r.nodes}x{r.ranks_per_node}" + (f"*{len(r.state.tasks)}" if r.state.tasks else "")
        lines.append(f"{r.name[:10]:<10} {r.run_id[:20]:<20} {(r.job or '')[:11]:<11} {r.site[:8]:<8} "
                     f"{state[:9]:<9} {when:<11} {shape}")
    return "\n".join(lines)

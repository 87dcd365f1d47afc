"""What a run is doing: the scheduler's state, the ranks' own notes, as data and as text.

Used by `hpctrain status/list/cancel/submit --wait` and by the Python API alike. The scheduler's
output is parsed in slurmstate (Slurm) and backends/local.py (this machine) only.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .backends import JobState, backend_of
from .runs import Run, find, indexed, rank_identity_files

_FAILED = re.compile(r"^rank (?P<rank>\d+) on (?P<node>\S+) exited (?P<code>-?\d+): (?P<error>.*)$")


def rank_failures(run_dir: Path) -> list[dict]:
    """The bootstrap's status/rank-R.failed notes (of every task, for a sweep), by rank."""
    out = []
    for path in sorted(run_dir.glob("status/rank-*.failed")) + sorted(run_dir.glob("tasks/*/status/rank-*.failed")):
        text = path.read_text(errors="replace").strip()
        m = _FAILED.match(text)
        note = ({"rank": int(m["rank"]), "node": m["node"], "exit": int(m["code"]), "error": m["error"]}
                if m else {"rank": None, "node": None, "exit": None, "error": text})
        task = path.parent.parent.name if path.parent.parent.parent.name == "tasks" else None
        out.append(dict(note, task=int(task) if task is not None else None))
    return sorted(out, key=lambda n: (n["task"] or 0, n["rank"] if n["rank"] is not None else -1))


def rank_identities(run_dir: Path) -> list[dict]:
    """status/rank-R.json, written by every rank at start: rank, local rank, node, pid."""
    out = []
    for path in rank_identity_files(run_dir):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # being written: the bootstrap replaces it atomically, so only a race
    return sorted(out, key=lambda r: r.get("rank", 0))


@dataclass
class RunStatus:
    run_id: str
    name: str
    site: str
    backend: str
    job: str | None
    path: str
    submitted: str | None
    nodes: int
    ranks_per_node: int
    state: JobState
    failures: list[dict] = field(default_factory=list)
    task_values: list[dict] = field(default_factory=list)
    ended: str | None = None  # why the job ended without success (status/failure.json)

    def to_json(self) -> dict:
        import msgspec
        d = asdict(self)
        d["state"] = msgspec.to_builtins(self.state)
        d["state"]["done"] = self.state.done
        return d


def _quick_state(run: Run) -> JobState:
    """The last state recorded in run.json: final states are kept there once seen."""
    rec = run.record
    tasks = [JobState(t[1], exit_code=t[2], job=t[0]) for t in rec.get("task_states") or []]
    st = JobState(rec.get("state") or "UNKNOWN", exit_code=rec.get("exit_code"),
                  job=str(rec.get("job_id")), tasks=tasks)
    if tasks:
        from collections import Counter
        st.extra["counts"] = dict(Counter(t.state for t in tasks))
    return st


def gather(run: Run, *, live: bool = True) -> RunStatus:
    rec = run.record
    state = _quick_state(run)
    if live and not (state.done and rec.get("final")):
        state = backend_of(rec).state(run)
        if state.state == "UNKNOWN" and rec.get("final"):
            state = _quick_state(run)
        elif state.done:
            # Kept: Slurm forgets a job MinJobAge seconds after it ends (without accounting).
            run.update(state=state.state, exit_code=state.exit_code, final=True,
                       task_states=[[t.job, t.state, t.exit_code] for t in state.tasks])
        elif state.state != rec.get("state"):
            run.update(state=state.state)
    return RunStatus(run_id=run.id, name=rec.get("name", "?"), site=rec.get("site", "?"),
                     backend=rec.get("backend", "?"), job=str(rec.get("job_id")), path=str(run.path),
                     submitted=rec.get("submitted"), nodes=rec.get("nodes") or 0,
                     ranks_per_node=rec.get("procs_per_node") or 0, state=state,
                     failures=rank_failures(run.path), task_values=rec.get("tasks") or [],
                     ended=_ending(run.path))


def _ending(run_dir: Path) -> str | None:
    """The batch shell's summary of a failed, preflight-stopped or not-requeued job."""
    try:
        data = json.loads((run_dir / "status" / "failure.json").read_text())
    except (OSError, ValueError):
        return None
    return f"{data.get('reason', '?')}: {data.get('message', '')}"


def status(ref: str) -> RunStatus:
    return gather(find(ref))


def recent(limit: int = 20, live: bool = True) -> list[RunStatus]:
    entries = indexed()[-limit:]
    out = []
    for e in reversed(entries):
        try:
            out.append(gather(Run(Path(e["path"])), live=live))
        except Exception as exc:  # one broken run must not hide the others
            out.append(RunStatus(e["run_id"], e.get("name") or "?", e.get("site") or "?", "?",
                                 str(e.get("job_id")), e["path"], e.get("submitted"), 0, 0,
                                 JobState("UNKNOWN", reason=str(exc))))
    return out


# ----------------------------------------------------------------------------- text

def describe(state: JobState) -> str:
    """One phrase: 'PENDING (Resources)', 'FAILED exit 3', 'RUNNING 00:01:02 on node[1-2]'."""
    s = state.state
    if s == "PENDING" and state.reason:
        return f"PENDING ({state.reason})"
    parts = [s]
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
    counts = state.extra.get("counts") or {}
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
            head = f"  {where}rank {f['rank']} on {f['node']} exit {f['exit']}: " if f["rank"] is not None else "  "
            lines.append(head + f["error"])
    return "\n".join(lines)


def format_table(rows: list[RunStatus]) -> str:
    """An 80-column table of runs, newest first."""
    lines = [f"{'NAME':<10} {'RUN':<20} {'JOB':<11} {'SITE':<8} {'STATE':<9} {'SUBMITTED':<11} NxR"]
    for r in rows:
        when = (r.submitted or "")[5:16].replace("T", " ")
        state = r.state.state + (f"({r.state.exit_code})" if r.state.done and r.state.exit_code else "")
        shape = f"{r.nodes}x{r.ranks_per_node}" + (f"*{len(r.state.tasks)}" if r.state.tasks else "")
        lines.append(f"{r.name[:10]:<10} {r.run_id[:20]:<20} {(r.job or '')[:11]:<11} {r.site[:8]:<8} "
                     f"{state[:9]:<9} {when:<11} {shape}")
    return "\n".join(lines)


def wait(run: Run, on_change=None, poll: float = 1.0, timeout: float | None = None) -> RunStatus:
    """Poll until the run reaches a final state; on_change(status) on every change of state."""
    deadline = None if timeout is None else time.monotonic() + timeout
    last = None
    while True:
        st = gather(run)
        key = (describe(st.state), counts_line(st.state))
        if on_change and key != last:
            on_change(st)
        last = key
        if st.state.done:
            return st
        if deadline is not None and time.monotonic() > deadline:
            return st
        time.sleep(poll)

"""Shared by the backends: one state for an array from its tasks' states, and time formatting."""
from __future__ import annotations

from collections import Counter

from .base import JobState, State

# Which task state speaks for the whole array, most telling first.
_PRECEDENCE = (State.RUNNING, State.REQUEUED, State.PENDING, State.SUSPENDED, State.FAILED,
               State.NODE_FAIL, State.OUT_OF_MEMORY, State.TIMEOUT, State.PREEMPTED, State.LOST,
               State.STOPPED, State.CANCELLED, State.UNKNOWN, State.COMPLETED)


def summarise(job: str, tasks: list[JobState]) -> JobState:
    counts = Counter(t.state for t in tasks)
    state = next((s for s in _PRECEDENCE if s in counts), State.UNKNOWN)
    codes = [t.exit_code for t in tasks if t.exit_code]
    exit_code = (max(codes) if codes else 0) if all(t.done for t in tasks) else None
    reason = next((t.reason for t in tasks if t.state == State.PENDING and t.reason), None)
    nodes = ",".join(sorted({t.nodes for t in tasks if t.nodes and t.state == State.RUNNING})) or None
    return JobState(state=state, exit_code=exit_code, reason=reason, nodes=nodes, job=job,
                    tasks=tasks, counts={s.value: n for s, n in counts.items()})


def fmt_elapsed(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    d, s = divmod(int(seconds), 86400)
    text = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{d}-{text}" if d else text

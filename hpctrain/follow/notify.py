"""`submit --wait --notify`: a run's events sent from the machine that follows it.

For clusters whose compute nodes cannot reach the webhook (common): the submitting machine
(or the login node it runs on) follows the run anyway, and sends what it sees change: the
start, a requeue (a preemption or a save before the time limit), a node left out, the end
(completed, failed, stopped). The sending itself is rank/notify.py's (never fails, never holds
the wait more than a few seconds, records each outcome in the run's status/notify.jsonl).
"""
from __future__ import annotations

from ..backends import State
from ..rank import notify as sender
from .status import RunStatus

_FAILED = {State.FAILED, State.TIMEOUT, State.NODE_FAIL, State.OUT_OF_MEMORY, State.LOST}


class Notifier:
    """Called with each status the wait sees; sends each event once, in the order seen."""

    def __init__(self, settings: dict, run_dir: str):
        self.settings, self.run_dir = settings, run_dir
        self.ran = False
        self.restarts = 0
        self.excluded = 0
        self.ended = False
        self.queued_again = False
        self.last = None
        self.where = f"{sender.here()} (submit --wait --notify)"

    def _send(self, event: str, st: RunStatus, detail: str | None = None) -> None:
        info = {"name": st.name, "run_id": st.run_id, "job": st.job, "site": st.site,
                "state": st.state.state.value}
        if detail:
            info["detail"] = detail
        sender.send(self.run_dir, self.settings, event, info, self.where)

    def __call__(self, st: RunStatus) -> None:
        s = st.state
        key = (s.state, s.restarts, len(st.excluded))
        if key == self.last or self.ended:
            return
        self.last = key
        for e in st.excluded[self.excluded:]:
            self._send("node_excluded", st, f"{e['node']}: {e['reason']}")
        self.excluded = len(st.excluded)
        # A requeue: seen pending again after it ran, or (when the polls missed that) a
        # restart count higher than the last one counted. Each is sent once.
        again = s.state in (State.REQUEUED, State.PENDING) and not self.queued_again
        if self.ran and (s.restarts > self.restarts or again):
            self.restarts = max(self.restarts + 1, s.restarts)
            self._send("requeued", st, f"restart {self.restarts}")
        self.queued_again = s.state in (State.REQUEUED, State.PENDING) and self.ran
        if s.state == State.RUNNING and not self.ran:  # the first start only
            self.ran = True
            self._send("start", st, f"on {s.nodes}" if s.nodes else None)
        if not s.done:
            return
        self.ended = True
        if s.state == State.COMPLETED:
            self._send("completed", st)
        elif s.state == State.PREEMPTED:
            self._send("preempted", st)
        elif s.state == State.CANCELLED:
            self._send("stopped", st)
        elif s.state in _FAILED:
            hang = "hang" in (st.ended or "")
            self._send("hang" if hang else "failed", st,
                       st.ended or (f"exit {s.exit_code}" if s.exit_code else s.state.value))

"""`submit --wait --notify`: a run's events sent from the machine that follows it.

For clusters whose compute nodes cannot reach the webhook (common): the submitting machine
(or the login node it runs on) follows the run anyway, and sends the events the job itself would
send (rank/notify.py from the batch shell's hooks, templates/), with the same words and in the
same order:

    start                       the first attempt runs
    node_excluded               a node left out of the next attempt (before its requeue)
    node_replaced               a spare took a blamed node's place, in the same allocation
    preempted                   the scheduler preempted it and it is requeued
    requeued                    an attempt after a requeue runs
    completed | failed | hang | stopped | preempted     the end, once

The sending itself is rank/notify.py's (never fails, never holds the wait more than a few
seconds, records each outcome in the run's status/notify.jsonl).
"""
from __future__ import annotations

import glob
import json
import os

from ..backends import State
from ..rank import notify as sender
from ..runs.untrusted import MAX_SMALL, read_regular
from .status import RunStatus

_STOPPED = {State.CANCELLED, State.STOPPED, State.TIMEOUT}
# The job's failure records (status/failure.json reasons) that end it stopped, not failed.
_STOP_REASONS = ("cancelled", "idle_gpus", "preempted")
MAX_NOTES = 16  # stop notes read per look: one is enough to say which signal came


def stop_signals(run_dir: str) -> dict[int, set[str]]:
    """The signals the ranks' stop notes name (status/stop-R.json, written when a signal reached
    rank R: rank/stop.py), by the attempt (restart count) they were written in. Regular files
    only, each small, a bounded number; a note that cannot be read says nothing."""
    out: dict[int, set[str]] = {}
    for path in sorted(glob.glob(os.path.join(glob.escape(run_dir), "status", "stop-*.json")))[:MAX_NOTES]:
        try:
            note = json.loads(read_regular(path, MAX_SMALL))
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(note, dict) or not isinstance(note.get("signal"), str):
            continue
        attempt = note.get("job_restart", 0)
        if type(attempt) is int and 0 <= attempt < 1 << 20:
            out.setdefault(attempt, set()).add(note["signal"][:16])
    return out


class Notifier:
    """Called with each status the wait sees; sends each event once, in the job's order."""

    def __init__(self, settings: dict, run_dir: str):
        self.settings, self.run_dir = settings, run_dir
        self.ran = False
        self.requeues = 0  # requeues seen: pending again after running, or a higher restart count
        self.announced = 0  # of those, the ones whose next attempt was seen running ("requeued")
        self.excluded = 0
        self.replaced = 0
        self.ended = False
        self.queued_again = False
        self.last = None
        self.signals: dict[int, set[str]] = {}  # attempt -> the signals its ranks noted
        self.where = f"{sender.here()} (submit --wait --notify)"

    def _send(self, event: str, st: RunStatus, detail: str | None = None) -> None:
        info = {"name": st.name, "run_id": st.run_id, "job": st.job, "site": st.site,
                "state": st.state.state.value}
        if detail:
            info["detail"] = detail
        sender.send(self.run_dir, self.settings, event, info, self.where)

    def __call__(self, st: RunStatus) -> None:
        s = st.state
        if self.ended:
            return
        if s.state == State.RUNNING:
            # The ranks' stop notes live until the next attempt starts: kept here as seen,
            # so that a requeue the polls see late still knows what signal came before it.
            for attempt, sigs in stop_signals(self.run_dir).items():
                self.signals.setdefault(attempt, set()).update(sigs)
        key = (s.state, s.restarts, len(st.excluded), len(st.replacements))
        if key == self.last:
            return
        self.last = key
        for e in st.excluded[self.excluded:]:
            self._send("node_excluded", st, f"{e['node']}: {e['reason']}")
        self.excluded = len(st.excluded)
        for r in st.replacements[self.replaced:]:
            self._send("node_replaced", st, f"{', '.join(r['out'])} replaced by "
                       f"{', '.join(r['in'])} after the {r['why']} (job {r['job_id']}, no requeue)")
        self.replaced = len(st.replacements)
        # A requeue: seen pending again after it ran, or (when the polls missed that) a
        # restart count higher than the last one counted. A preemption says so first, as the
        # job does before it requeues itself; "requeued" is the next attempt running.
        again = s.state in (State.REQUEUED, State.PENDING) and not self.queued_again
        if self.ran and (s.restarts > self.requeues or again):
            ended = self.requeues
            self.requeues = max(self.requeues + 1, s.restarts)
            if self._preempted(st, ended):
                self._send("preempted", st, f"requeueing job {st.job} (requeue {self.requeues})")
        self.queued_again = s.state in (State.REQUEUED, State.PENDING) and self.ran
        if s.state == State.RUNNING and not self.ran:  # the first start
            self.ran = True
            self._send("start", st, f"on {s.nodes}" if s.nodes else None)
        elif s.state == State.RUNNING and self.announced < self.requeues:
            self.announced = self.requeues
            self._send("requeued", st, f"running again (restart {self.requeues})"
                       + (f" on {s.nodes}" if s.nodes else ""))
        if not s.done:
            return
        self.ended = True
        event, detail = ending(st)
        self._send(event, st, detail)

    def _preempted(self, st: RunStatus, attempt: int) -> bool:
        """Whether the attempt that just ended was preempted: its ranks got SIGTERM (a
        preemption's signal; the time-limit warning is preemption.signal) and it recorded no
        failure (a cancel, a hang or a node's fault does: status/failure.json, then
        failures.jsonl once the next attempt starts)."""
        if "TERM" not in self.signals.get(attempt, set()) | stop_signals(self.run_dir).get(attempt, set()):
            return False
        failed = st.ended is not None or any(h.get("attempt") == attempt + 1 for h in st.history)
        return not failed


def ending(st: RunStatus) -> tuple[str, str | None]:
    """The event that ends a run, and its detail: the one the job's batch shell sends for the
    same ending (completed, preempted and not requeued, stopped, hang, failed)."""
    s = st.state
    reason, _, message = (st.ended or "").partition(": ")
    if s.state == State.COMPLETED:
        return "completed", None
    detail = st.ended or (f"exit {s.exit_code}" if s.exit_code else s.state.value)
    if s.state == State.PREEMPTED or (reason == "preempted"
                                      and message.startswith("preempted by the scheduler")):
        return "preempted", detail
    if s.state in _STOPPED or reason in _STOP_REASONS:
        return "stopped", detail
    return ("hang" if reason == "hang" else "failed"), detail

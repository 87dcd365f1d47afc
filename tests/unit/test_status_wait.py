"""status.wait's polling: it backs off from 1 s by x1.5 to 30 s while nothing changes, starts
again at 1 s on a change of state, and a timeout returns the last state it saw. The scheduler
(gather) and the clock are replaced so that hours of polling take no time."""
from __future__ import annotations

import types

import pytest

from hpctrain.follow import status
from hpctrain.backends.base import JobState, State
from hpctrain.backends.slurm.backend import SlurmBackend


class Clock:
    """time.monotonic and time.sleep for hpctrain.status alone: sleeping moves the clock."""

    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def run_status(state: State, n: int) -> status.RunStatus:
    # `elapsed` is not part of what wait compares: it tells the polls apart.
    return status.RunStatus(run_id="r", name="n", site="s", backend="slurm", job="1", path="/r",
                            submitted=None, nodes=1, ranks_per_node=1,
                            state=JobState(state, elapsed=str(n)))


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(status, "time", types.SimpleNamespace(monotonic=c.monotonic, sleep=c.sleep))
    return c


def scheduler(monkeypatch, states: list[State]) -> list:
    """gather answers states[i] on its i-th call, then the last one for ever."""
    seen = []

    def gather(run):
        seen.append(run_status(states[min(len(seen), len(states) - 1)], len(seen)))
        return seen[-1]
    monkeypatch.setattr(status, "gather", gather)
    # A Slurm run: its backend's schedule is the back-off these tests describe.
    monkeypatch.setattr(status, "for_run", lambda run: SlurmBackend)
    return seen


def test_polls_back_off_to_30_s_and_start_again_on_a_change(clock, monkeypatch):
    scheduler(monkeypatch, [State.PENDING] * 12 + [State.RUNNING] * 12 + [State.COMPLETED])
    changes = []
    final = status.wait("run", on_change=lambda st: changes.append(st.state.state))
    assert final.state.state == State.COMPLETED
    assert changes == [State.PENDING, State.RUNNING, State.COMPLETED]
    backoff = [1, 1.5, 2.25, 3.375, 5.0625, 7.59375, 11.390625, 17.0859375, 25.62890625,
               30, 30, 30]
    assert clock.sleeps == pytest.approx(backoff + backoff)  # no sleep after the final state


def test_timeout_returns_the_last_state(clock, monkeypatch):
    seen = scheduler(monkeypatch, [State.PENDING, State.RUNNING])
    final = status.wait("run", timeout=100)
    assert final is seen[-1] and final.state.state == State.RUNNING
    assert clock.now == pytest.approx(100)  # the last sleep ends at the deadline, not past it
    assert clock.sleeps[:3] == pytest.approx([1, 1, 1.5])
    assert max(clock.sleeps) <= 30
    assert len(seen) == len(clock.sleeps) + 1  # one query after the last sleep, none more

"""`submit --wait` and Handle.wait() see a local or ssh job's end within a second of it (issue 28,
item 2): the poll schedule comes from the backend, and a local or ssh job's is short and flat,
while a scheduler is asked after 1 s and then less and less often. Checked by the schedule the
wait follows (its sleeps), not by a clock."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from hpctrain.backends import JobState, State
from hpctrain.backends.local import LocalBackend
from hpctrain.backends.slurm.backend import SlurmBackend
from hpctrain.backends.ssh.backend import SshBackend
from hpctrain.follow import status


def test_the_backends_poll_schedules():
    assert LocalBackend.poll[1] <= 0.5 and SshBackend.poll[1] <= 0.5  # the end seen within 1 s
    assert SlurmBackend.poll[0] == 1.0 and SlurmBackend.poll[1] > 1.0  # a scheduler: back off


@pytest.mark.parametrize("backend", [LocalBackend, SshBackend, SlurmBackend])
def test_wait_sleeps_no_longer_than_the_backends_schedule(backend, monkeypatch):
    answers = [State.PENDING] + [State.RUNNING] * 30 + [State.COMPLETED]
    asked = []

    def gather(run):
        asked.append(len(asked))
        return SimpleNamespace(state=JobState(answers[len(asked) - 1]))
    slept, now = [], [0.0]

    def sleep(seconds):  # a clock that moves only when the wait sleeps
        slept.append(seconds)
        now[0] += seconds
    monkeypatch.setattr(status, "gather", gather)
    monkeypatch.setattr(status, "for_run", lambda run: backend)
    monkeypatch.setattr(status.time, "sleep", sleep)
    monkeypatch.setattr(status.time, "monotonic", lambda: now[0])
    st = status.wait(object())
    assert st.state.state == State.COMPLETED and len(asked) == len(answers)
    first, longest = backend.poll
    assert slept[0] == pytest.approx(first)  # the first query after the first interval
    assert max(slept) == pytest.approx(longest) if backend is not SlurmBackend else max(slept) <= longest
    if backend is not SlurmBackend:
        assert all(s == pytest.approx(first) for s in slept)  # flat: no back-off on this machine

"""One launch for both search methods (search/allocation.py, issue 51 item 1): a launch whose
ranks started hands the next one of the same allocation the name of its directory, so that the
next relies on the node checks it passed (rank/before/preflight.earlier_trial) — a population's
member relaunched after a copy as much as a study's next trial; a signal to the worker reaches
the running launch; the launch's output goes to its own logs/job.out. Real bash processes."""
import signal
import time

from hpctrain.backends.local import LocalBackend
from hpctrain.schema.spec import Preemption
from hpctrain.search.allocation import CHECKED_BY, Allocation
from hpctrain.search.rules import trial_dir

STARTED = """#!/bin/bash
echo "checked by: ${%s:-none}"
echo '{}' > "$(dirname "$0")/status/progress-0.json"
""" % CHECKED_BY
NOT_STARTED = """#!/bin/bash
echo "checked by: ${%s:-none}"
exit 3
""" % CHECKED_BY
WAITS = """#!/bin/bash
trap 'echo "got TERM"; exit 0' TERM
echo "checked by: ${%s:-none}"
while :; do sleep 0.1; done
""" % CHECKED_BY


def _script(run_dir, number: int, text: str):
    d = trial_dir(run_dir, number)
    for sub in ("logs", "status"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    path = d / "job.sh"
    path.write_text(text)
    return path


def _log(run_dir, number: int) -> str:
    return (trial_dir(run_dir, number) / "logs" / "job.out").read_text()


def _run(alloc: Allocation, number: int, text: str) -> int:
    alloc.start(number, _script(alloc.run_dir, number, text))
    while not alloc.wait():
        pass
    return alloc.ended()


def test_a_launch_that_started_its_ranks_lets_the_next_rely_on_its_node_checks(tmp_path):
    alloc = Allocation(tmp_path, LocalBackend(), Preemption())
    assert _run(alloc, 0, NOT_STARTED) == 3 and alloc.checked_by is None
    assert _run(alloc, 1, STARTED) == 0 and alloc.checked_by == "trials/0001"
    assert _run(alloc, 2, STARTED) == 0 and alloc.checked_by == "trials/0002"
    # The same member relaunched in its own directory (PBT, after a copy): the earlier launch
    # of that directory is the one it relies on.
    assert _run(alloc, 2, NOT_STARTED) == 3
    assert [_log(tmp_path, n).splitlines()[-1] for n in (0, 1, 2)] == [
        "checked by: none", "checked by: none", "checked by: trials/0002"]
    assert "checked by: trials/0001" in _log(tmp_path, 2).splitlines()[0]
    assert len(alloc.durations) == 4


def test_a_signal_to_the_worker_reaches_the_running_launch(tmp_path):
    alloc = Allocation(tmp_path, LocalBackend(), Preemption())
    alloc.start(0, _script(tmp_path, 0, WAITS))
    deadline = time.monotonic() + 30
    while "checked by" not in _log(tmp_path, 0) and time.monotonic() < deadline:
        alloc.wait(0.05)
    alloc.on_signal(signal.SIGTERM, None)
    while not alloc.wait():
        pass
    assert alloc.ended(by_itself=False) == 0 and alloc.signalled == signal.SIGTERM
    assert "got TERM" in _log(tmp_path, 0) and alloc.durations == []
    # Here no scheduler runs the allocation: nothing to requeue; the trial stays RUNNING.
    assert alloc.after_signal("trial 0") == 128 + signal.SIGTERM

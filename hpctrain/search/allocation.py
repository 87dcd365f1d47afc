"""What a study's worker (or a population's member) owns: one allocation of the job's shape,
and the one way both start a run inside it.

A launch is the job's own script for trials/NNNN, started with what lets it rely on the node
checks an earlier launch of this allocation passed (rank/before/preflight.earlier_trial), its
output in that directory's logs/job.out. A signal to the worker (preemption, the time-limit
warning, scancel, `hpctrain cancel`) goes on to the running launch, whose ranks save; the
worker then requeues the allocation through its backend while the scheduler still runs it.
Everything the scheduler knows (this allocation's id, nodes, end, requeues) is the backend's.
"""
from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ..rank.records import open_append
from ..schema.spec import Preemption
from .rules import trial_dir, trial_rel
from .trials import StudyJob, study_preemption

POLL = 0.5  # seconds between two looks at a running launch's progress
CHECKED_BY = "HPCTRAIN_NODES_CHECKED"  # read by rank/before/preflight.earlier_trial
# Another run fits the time left when the median run so far, this much longer (its start and
# save), ends before the allocation does.
MARGIN = 1.1
# After `scontrol requeue`, the scheduler ends this run of the allocation (its processes are
# signalled, then killed after KillWait): the worker waits for that instead of going on.
REQUEUED_WAIT = 300


def log(text: str) -> None:
    print(f"hpctrain worker: {text}", file=sys.stderr, flush=True)


def ranks_started(d: Path, since: float) -> bool:
    """Whether a trial's ranks started since `since` (rank 0 reported progress in this attempt,
    not an earlier attempt's file): then every node of the allocation passed the launch's node
    checks (health gate, barrier, network floor) first."""
    try:
        return (d / "status" / "progress-0.json").lstat().st_mtime >= since
    except OSError:
        return False


def fits(durations: list[float], end: float | None, now: float) -> bool:
    """Whether another run fits the time this allocation has left (the median run so far, plus
    MARGIN for its start and save); True without a known end or any run yet."""
    if end is None or not durations:
        return True
    return end - now >= statistics.median(durations) * MARGIN


class Allocation:
    def __init__(self, run_dir, backend, preemption: Preemption):
        self.run_dir = Path(run_dir)
        self.backend = backend
        self.preemption = preemption
        self.ref = self.backend.allocation_ref()
        self.nodes = self.backend.allocation_nodes()
        self.end = self.backend.allocation_end(self.ref)
        # The job's preemption signal (the time-limit warning), where its scheduler sends one.
        self.stop_signal = getattr(signal, "SIG" + self.preemption.signal) \
            if self.backend.preemption else signal.SIGTERM
        self.child: subprocess.Popen | None = None
        self.signalled: int | None = None
        # The launch of this allocation whose ranks started: the node checks it passed on these
        # nodes hold for the next ones. None at first, and in every new allocation (a requeue
        # starts a new worker process).
        self.checked_by: str | None = None
        self.durations: list[float] = []  # of the runs that ended by themselves
        self._number: int | None = None
        self._started = 0.0

    @classmethod
    def of_study(cls, run_dir, study: StudyJob) -> "Allocation":
        """The allocation this process runs in, for a worker of the study in run_dir."""
        from ..backends import backend_class
        return cls(run_dir, backend_class(study.site.scheduler)(), study_preemption(study))

    # --- signals
    def install(self) -> None:
        for sig in {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, self.stop_signal}:
            signal.signal(sig, self.on_signal)

    def on_signal(self, signum, frame) -> None:
        first = self.signalled is None
        self.signalled = signum
        if first and self.running():
            log(f"{signal.Signals(signum).name}: passed to the running trial; it stays RUNNING "
                "and resumes from its checkpoint")
            self.signal(signum)

    def signal(self, signum) -> None:
        """Send the running launch (its shell, which passes it to the ranks) a signal."""
        if self.child is None:
            return
        try:
            os.kill(self.child.pid, signum)
        except ProcessLookupError:
            pass

    # --- one launch
    def start(self, number: int, script) -> None:
        """Start trial (or member) `number`'s job script; OSError when its log cannot be opened
        (never through a link: rank/records.open_append)."""
        d = trial_dir(self.run_dir, number)
        env = dict(os.environ)
        env.pop(CHECKED_BY, None)
        if self.checked_by is not None:
            env[CHECKED_BY] = self.checked_by
        with open_append(str(d / "logs" / "job.out"), str(self.run_dir)) as out:
            # Here (the local site) the launch's shell leads a session of its own, as a
            # submitted job's does: its status/pid then names it to cancel and to `submit
            # --resume` (backends/local.processes_of), also after this worker is killed. Under
            # a scheduler it stays in the job's, which the scheduler's signals reach.
            self.child = subprocess.Popen(["bash", str(script)], stdout=out,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=env, start_new_session=self.backend.runs_here)
        self._number, self._started = number, time.time()

    def running(self) -> bool:
        return self.child is not None and self.child.poll() is None

    def wait(self, timeout: float = POLL) -> bool:
        """Wait up to `timeout` for the launch to end (back at once when it does: the next one
        starts without a poll's delay); whether it has ended."""
        try:
            self.child.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def stop(self) -> None:
        """Its ranks save and end (SIGTERM, as on a preemption); returns once they have."""
        self.signal(signal.SIGTERM)
        self.child.wait()

    def ended(self, by_itself: bool = True) -> int:
        """The launch's exit status, once it ended. by_itself: its length counts toward what
        the time left must fit (not a run ended by a signal or stopped early)."""
        status = self.child.wait()
        self.child = None
        if ranks_started(trial_dir(self.run_dir, self._number), self._started):
            self.checked_by = trial_rel(self._number)
        if by_itself:
            self.durations.append(time.time() - self._started)
        return status

    # --- the allocation's time
    def fits_another(self) -> bool:
        return fits(self.durations, self.end, time.time())

    def after_signal(self, what: str) -> int:
        """The worker was signalled while `what` ran (it saved and stays RUNNING). A job the
        scheduler still runs (a preemption, the time-limit warning) is requeued: its next run
        continues it; a cancelled or timed-out one just ends. The worker's exit status."""
        pre = self.preemption
        if pre.requeue and self.backend.allocation_running(self.ref):
            count = self.backend.allocation_restarts()
            if count < pre.max_requeues:
                log(f"{what} saved; requeueing job {self.ref} (requeue {count + 1} of at "
                    f"most {pre.max_requeues})")
                try:
                    self.backend.requeue_allocation(self.ref)
                except Exception as exc:  # the scheduler refused: it stays RUNNING
                    log(f"the requeue failed: {exc}")
                    return 75
                time.sleep(REQUEUED_WAIT)
                return 0
            log(f"not requeueing: job {self.ref} has been requeued {count} time(s) "
                f"(preemption.max_requeues); `hpctrain submit --resume` continues the study")
        log(f"{what} stays RUNNING; `hpctrain submit --resume` continues the study")
        return 128 + int(self.signalled)

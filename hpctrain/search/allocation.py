"""What a study's worker (or a population's member) owns: one allocation of the job's shape,
and the one way both start a run inside it.

A launch is the job's own script for trials/NNNN, started with what lets it rely on the node
checks an earlier launch of this allocation passed (rank/before/preflight.earlier_trial), its
output in that directory's logs/job.out. A signal to the worker (preemption, the time-limit
warning, scancel, `hpctrain cancel`) goes on to the running launch, whose ranks save; the
worker then requeues the allocation through its backend while the scheduler still runs it.
Everything the scheduler knows (this allocation's id, nodes, end, requeues) is the backend's.

A study outlives its workers' time limit: a worker whose allocation cannot fit another trial
while the study still needs some, or whose time-limit warning came mid-trial, requeues its
allocation as a preempted job does. Those requeues are the study's length, not failures: they
are counted apart (study/workers/<index>.json) and not against preemption.max_requeues, so a
study of 100 one-hour trials under a 4-hour limit finishes by itself.
"""
from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ..rank.records import RecordError, open_append, read_json, write_json
from ..runs import tree
from ..schema.spec import Preemption
from ..runs.records import trial_dir
from .rules import trial_rel
from .trials import StudyJob, study_preemption

POLL = 0.5  # seconds between two looks at a running launch's progress
CHECKED_BY = "HPCTRAIN_NODES_CHECKED"  # read by rank/before/preflight.earlier_trial
# Another run fits the time left when the median run so far, this much longer (its start and
# save), ends before the allocation does.
MARGIN = 1.1
# After `scontrol requeue`, the scheduler ends this run of the allocation (its processes are
# signalled, then killed after KillWait): the worker waits for that instead of going on.
REQUEUED_WAIT = 300
# The time-limit warning comes preemption.lead_time before the allocation's end; a signal this
# much earlier still is taken for it (the scheduler's clock and ours, a slow start).
WARNING_SLACK = 30


def log(text: str) -> None:
    print(f"hpctrain worker: {text}", file=sys.stderr, flush=True)


def progress_stamp(d: Path) -> tuple[int, int] | None:
    """What a trial's rank-0 progress file is now (inode, mtime in ns), None when absent."""
    try:
        st = (d / "status" / "progress-0.json").lstat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def ranks_started(d: Path, before: tuple[int, int] | None) -> bool:
    """Whether a trial's ranks started since its progress file was `before` (rank 0 reported
    progress in this attempt, not an earlier attempt's file): then every node of the allocation
    passed the launch's node checks (health gate, barrier, network floor) first. Compared by the
    file itself, not by clocks: a file's time is the kernel's coarse clock, a tick behind
    time.time(), and a loaded machine may run the child before the parent reads the time."""
    now = progress_stamp(d)
    return now is not None and now != before


def fits(durations: list[float], end: float | None, now: float) -> bool:
    """Whether another run fits the time this allocation has left (the median run so far, plus
    MARGIN for its start and save); True without a known end or any run yet."""
    if end is None or not durations:
        return True
    return end - now >= statistics.median(durations) * MARGIN


class Allocation:
    def __init__(self, run_dir, backend, preemption: Preemption, worker: int = 0):
        self.run_dir = Path(run_dir)
        self.backend = backend
        self.preemption = preemption
        self.worker = worker
        self.ref = self.backend.allocation_ref()
        self.nodes = self.backend.allocation_nodes()
        self.end = self.backend.allocation_end(self.ref)
        # The job's preemption signal (the time-limit warning), where its scheduler sends one.
        self.stop_signal = getattr(signal, "SIG" + self.preemption.signal) \
            if self.backend.preemption else signal.SIGTERM
        self.child: subprocess.Popen | None = None
        self.signalled: int | None = None
        self.for_time = False  # the signal was the time-limit warning
        # The launch of this allocation whose ranks started: the node checks it passed on these
        # nodes hold for the next ones. None at first, and in every new allocation (a requeue
        # starts a new worker process).
        self.checked_by: str | None = None
        self.durations: list[float] = []  # of the runs that ended by themselves
        self._number: int | None = None
        self._started = 0.0
        self._progress_before: tuple[int, int] | None = None

    @classmethod
    def of_study(cls, run_dir, study: StudyJob, worker: int) -> "Allocation":
        """The allocation this process runs in, for worker `worker` of the study in run_dir."""
        from ..backends import backend_class
        return cls(run_dir, backend_class(study.site.scheduler)(), study_preemption(study), worker)

    # --- signals
    def install(self) -> None:
        for sig in {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, self.stop_signal}:
            signal.signal(sig, self.on_signal)

    def on_signal(self, signum, frame) -> None:
        first = self.signalled is None
        self.signalled = signum
        if first:
            self.for_time = signum == self.stop_signal and self.time_is_up()
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
        self._progress_before = progress_stamp(d)
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
        if ranks_started(trial_dir(self.run_dir, self._number), self._progress_before):
            self.checked_by = trial_rel(self._number)
        if by_itself:
            self.durations.append(time.time() - self._started)
        return status

    # --- the allocation's time
    def fits_another(self) -> bool:
        """Whether another run ends before the time-limit warning would stop it (where the
        scheduler sends one), else before the allocation's end."""
        end = self.end
        if end is not None and self.backend.preemption and self.preemption.enabled:
            end -= self.preemption.lead_time
        return fits(self.durations, end, time.time())

    def time_is_up(self) -> bool:
        """Whether the allocation ends within the time-limit warning's lead time (and a slack)."""
        return self.end is not None and \
            time.time() >= self.end - self.preemption.lead_time - WARNING_SLACK

    def can_requeue(self) -> bool:
        """Whether this allocation may be queued again: the job asks for it, and the
        scheduler still runs it (not cancelled, timed out, or requeued already)."""
        return self.preemption.requeue and self.backend.allocation_running(self.ref)

    def after_signal(self, what: str) -> int:
        """The worker was signalled while `what` ran (it saved and stays RUNNING). A job the
        scheduler still runs (a preemption, the time-limit warning) is requeued: its next run
        continues it; a cancelled or timed-out one just ends. The worker's exit status."""
        pre = self.preemption
        if self.can_requeue():
            count = self.backend.allocation_restarts() - self.requeues_for_time()
            if self.for_time:
                return self.requeue(f"{what} saved at the time-limit warning", for_time=True)
            if count < pre.max_requeues:
                return self.requeue(f"{what} saved; requeueing job {self.ref} (requeue "
                                    f"{count + 1} of at most {pre.max_requeues})")
            log(f"not requeueing: job {self.ref} has been requeued {count} time(s) "
                f"(preemption.max_requeues); `hpctrain submit --resume` continues the study")
        log(f"{what} stays RUNNING; `hpctrain submit --resume` continues the study")
        return 128 + int(self.signalled)

    def requeue(self, why: str, for_time: bool = False) -> int:
        """Queue this allocation again; the worker's exit status (it ends with this run)."""
        if for_time:
            n = self.requeues_for_time() + 1
            why += (f"; requeueing job {self.ref} for the study's time (for the time limit: "
                    f"{n}, not counted against preemption.max_requeues)")
            try:  # before the requeue: the next run of this allocation reads it
                path = self._requeues_path()
                tree.make_dirs(path.parent, self.run_dir)  # never through a link
                write_json(str(path), {"job": self.ref, "for_time": n}, root=str(self.run_dir))
            except OSError as exc:
                log(f"the requeue for time is not recorded: {exc}")
        log(why)
        try:
            self.backend.requeue_allocation(self.ref)
        except Exception as exc:  # the scheduler refused: what ran stays RUNNING
            log(f"the requeue failed: {exc}")
            return 75
        time.sleep(REQUEUED_WAIT)
        return 0

    def _requeues_path(self) -> Path:
        return self.run_dir / "study" / "workers" / f"{self.worker}.json"

    def requeues_for_time(self) -> int:
        """How many times this allocation (this job: a `submit --resume` starts another) was
        requeued for the time limit (an untrusted file: anything else reads as none)."""
        try:
            data = read_json(str(self._requeues_path()), limit=4096)
        except (OSError, RecordError):
            return 0
        if not isinstance(data, dict) or data.get("job") != self.ref:
            return 0
        n = data.get("for_time")
        return n if isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 20 else 0

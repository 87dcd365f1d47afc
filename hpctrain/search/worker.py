"""A study's worker: one allocation of the job's shape (a Slurm array task, or a process on
the local site) running trials one after another, with no queue wait between them.

    python -m hpctrain.search.worker RUN_DIR WORKER

The loop: ask the study for a trial -> write trials/<n>/ and run its job script (the job's own
launch, inside this allocation) -> while it trains, feed the ranks' progress (the metric at
their step) to the pruner -> a pruned trial's ranks are signalled and save and end as on a
preemption, and it is told PRUNED -> tell the final value -> ask again. It stops asking when the
study has its trials, when its time left cannot fit another trial, or when the study stopped
itself (failures in a row).

A signal to this worker (preemption, the time-limit warning, scancel, `hpctrain cancel`) goes on
to the running trial, whose ranks save; the trial stays RUNNING in the study and, on Slurm, this
worker requeues its allocation while the job still runs (a preemption, the time-limit warning).
The requeued worker finds the RUNNING trial it owned (user attrs worker + job_id) and runs it
again in the same directory: the ranks resume from its newest checkpoint.
"""
from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ..job.search import max_failures
from ..rank.records import open_append, read_job_failure, read_progress
from . import journal, reading
from .spaces import distributions, optuna
from .trials import study_search, trial_dir, write_trial

POLL = 0.5  # seconds between two looks at a running trial's progress
WORKER_GONE = "worker gone"
ADOPT = "adopt"  # a RUNNING trial `submit --resume` hands to the new worker of its index
SURPLUS = "surplus: asked for beyond n_trials"
NOT_COUNTED = (WORKER_GONE, SURPLUS)  # failures that are no trial's fault


def log(text: str) -> None:
    print(f"hpctrain worker: {text}", file=sys.stderr, flush=True)


def job_ref() -> str:
    """This allocation's id, stable across its requeues: ARRAY_TASK on Slurm, else the job's."""
    if os.environ.get("SLURM_ARRAY_JOB_ID") and os.environ.get("SLURM_ARRAY_TASK_ID"):
        return f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID") or f"local-{os.getppid()}"


def nodes() -> str:
    return os.environ.get("SLURM_JOB_NODELIST") or os.uname().nodename


CHECKED_BY = "HPCTRAIN_NODES_CHECKED"


def ranks_started(d: Path, since: float) -> bool:
    """Whether a trial's ranks started since `since` (rank 0 reported progress in this attempt,
    not an earlier attempt's file): then every node of the allocation passed the launch's node
    checks (health gate, barrier, network floor) first."""
    try:
        return (d / "status" / "progress-0.json").lstat().st_mtime >= since
    except OSError:
        return False


def counted(trials) -> int:
    """Trials that count toward n_trials: every one but those failed because a worker went
    away (they are run again)."""
    return sum(1 for t in trials if t.user_attrs.get("fail_cause") not in NOT_COUNTED)


def surplus(trials, number: int, n_trials: int) -> bool:
    """Whether trial `number` is beyond the study's n_trials: workers that ask at the same
    moment for the last trial each get one; the later numbers give theirs back."""
    ahead = [t for t in trials if t.number < number
             and t.user_attrs.get("fail_cause") not in NOT_COUNTED]
    return len(ahead) >= n_trials


def failures_in_a_row(trials) -> tuple[int, str]:
    """Finished trials that failed, counted back from the newest finish; and the newest cause."""
    o = optuna()
    done = [t for t in trials if t.state.is_finished() and t.datetime_complete is not None
            and t.user_attrs.get("fail_cause") not in NOT_COUNTED]
    done.sort(key=lambda t: t.datetime_complete)
    n, cause = 0, ""
    for t in reversed(done):
        if t.state != o.trial.TrialState.FAIL:
            break
        n += 1
        cause = cause or str(t.user_attrs.get("fail_cause", "failed"))
    return n, cause


def fits(durations: list[float], end: float | None, now: float) -> bool:
    """Whether another trial fits the time this allocation has left (the median trial so far,
    plus a tenth for its start and save); True without a known end or any trial yet."""
    if end is None or not durations:
        return True
    need = statistics.median(durations) * 1.1
    return end - now >= need


def allocation_end() -> float | None:
    value = os.environ.get("SLURM_JOB_END_TIME", "")
    return float(value) if value.isdigit() else None


class Worker:
    def __init__(self, run_dir: str, index: int):
        self.run_dir = Path(run_dir)
        self.index = index
        self.study_job, self.search = study_search(run_dir)
        reading.load(run_dir, self.study_job.run_id)  # damage: one error, as `status` says it
        self.study = journal.load(run_dir, self.study_job.run_id, self.search, index)
        self.dists = distributions(self.search)
        self.job = job_ref()
        from ..backends import backend_class
        self.backend = backend_class(self.study_job.site.scheduler)()
        self.child: subprocess.Popen | None = None
        # The trial of this allocation whose ranks started: the node checks it passed on these
        # nodes hold for the next ones (rank/before/preflight.earlier_trial). None at first,
        # and in every new allocation (a requeue starts a new worker process).
        self.checked_by: str | None = None
        self.signalled: int | None = None
        self.durations: list[float] = []
        pre = self.study_job.spec.get("preemption") or {}
        # The job's preemption signal (the time-limit warning), where its scheduler sends one.
        self.stop_signal = getattr(signal, "SIG" + str(pre.get("signal") or "TERM"), signal.SIGTERM) \
            if self.backend.preemption else signal.SIGTERM
        self.max_requeues = int(pre.get("max_requeues", 3) or 0)
        self.requeue = bool(pre.get("requeue", True))
        self.end = allocation_end() or self.backend.allocation_end(self.job)

    # --- signals
    def install(self) -> None:
        for sig in {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, self.stop_signal}:
            signal.signal(sig, self.on_signal)

    def on_signal(self, signum, frame) -> None:
        first = self.signalled is None
        self.signalled = signum
        if first and self.child is not None and self.child.poll() is None:
            log(f"{signal.Signals(signum).name}: passed to the running trial; it stays RUNNING "
                "and resumes from its checkpoint")
            self._signal_child(signum)

    def _signal_child(self, signum) -> None:
        try:
            os.kill(self.child.pid, signum)
        except ProcessLookupError:
            pass

    # --- the loop
    def run(self) -> int:
        self.install()
        o = optuna()
        own = self.owned_running()
        if own is not None:
            log(f"resuming trial {own.number} from its checkpoint (its worker's allocation was "
                "requeued, or the study resumed)")
            # Trial(study, id): Optuna has no public way to reopen a RUNNING trial.
            trial = o.trial.Trial(self.study, own._trial_id)
            if own.user_attrs.get(ADOPT):
                trial.set_user_attr(ADOPT, False)
            status = self.run_trial(trial, own.number, own.params,
                                    int(own.user_attrs.get("attempts", 1)) + 1)
            if status is not None:
                return status
        while self.signalled is None:
            trials = self.study.get_trials(deepcopy=False)
            attrs = self.study.user_attrs
            if attrs.get("stopped"):
                log(f"the study stopped: {attrs['stopped']}")
                return 0
            n_trials = int(attrs.get("n_trials", self.search.n_trials))
            if counted(trials) >= n_trials:
                log(f"the study has its {n_trials} trial(s)")
                return 0
            if not fits(self.durations, self.end, time.time()):
                log("the time left cannot fit another trial: ending")
                return 0
            trial = self.study.ask(self.dists)
            if surplus(self.study.get_trials(deepcopy=False), trial.number, n_trials):
                # Another worker asked first for the last one: give this one back.
                trial.set_user_attr("fail_cause", SURPLUS)
                self.study.tell(trial, state=o.trial.TrialState.FAIL)
                return 0
            status = self.run_trial(trial, trial.number, trial.params, 1)
            if status is not None:
                return status
        return 0

    def owned_running(self):
        o = optuna()
        mine = [t for t in self.study.get_trials(deepcopy=False, states=(o.trial.TrialState.RUNNING,))
                if t.user_attrs.get("worker") == self.index
                and (t.user_attrs.get("job_id") == self.job or t.user_attrs.get(ADOPT))]
        return mine[0] if mine else None

    def run_trial(self, trial, number: int, params: dict, attempt: int) -> int | None:
        """Run one trial to its end; None to go on, or this worker's exit status."""
        o = optuna()
        d = trial_dir(self.run_dir, number)
        started = time.time()
        if attempt == 1:
            trial.set_user_attr("started", started)
        for key, value in (("worker", self.index), ("nodes", nodes()), ("job_id", self.job),
                           ("attempts", attempt), ("trial_dir", f"trials/{number:04d}")):
            trial.set_user_attr(key, value)
        try:
            script, _ = write_trial(self.run_dir, number, self.study_job, params)
        except Exception as exc:  # a value the job cannot take: this trial fails, not the study
            return self.fail(trial, number, f"could not prepare the trial: {exc}")
        log(f"trial {number}: {params}")
        try:  # never through a link (rank/records.open_append), as write_trial wrote the rest
            out = open_append(str(d / "logs" / "job.out"), str(self.run_dir))
        except OSError as exc:
            return self.fail(trial, number, f"could not open its log: {exc}")
        with out:
            # Here (the local site) the trial's shell leads a session of its own, as a submitted
            # job's does: its status/pid then names it to cancel and to `submit --resume`
            # (backends/local.processes_of), also after this worker is killed. Under a scheduler
            # it stays in the job's, which the scheduler's signals and process tracking reach.
            env = dict(os.environ)
            env.pop(CHECKED_BY, None)
            if self.checked_by is not None:
                env[CHECKED_BY] = self.checked_by
            self.child = subprocess.Popen(["bash", str(script)], stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=env,
                                          start_new_session=self.backend.runs_here)
            pruned_at = self.follow(trial, d)
            status = self.child.wait()
        self.child = None
        if ranks_started(d, started):
            self.checked_by = f"trials/{number:04d}"
        if self.signalled is not None:
            return self.after_signal(number)
        trial.set_user_attr("ended", time.time())
        self.durations.append(time.time() - started)
        if pruned_at is not None:
            trial.set_user_attr("pruned_step", pruned_at)
            self.study.tell(trial, state=o.trial.TrialState.PRUNED)
            log(f"trial {number}: pruned at step {pruned_at}")
            return None
        value = self.final_value(d)
        if status != 0:
            failure = read_job_failure(str(d))
            cause = failure.message if failure and failure.message else f"exit status {status}"
            return self.fail(trial, number, f"{cause[:400]} (logs: trials/{number:04d}/logs/)")
        if value is None:
            return self.fail(trial, number, f"no value of '{self.search.metric}' reported "
                             "(hpctrain_progress.report(step, {metric}=...))")
        self.study.tell(trial, value)
        log(f"trial {number}: {self.search.metric} = {value}")
        return None

    def fail(self, trial, number: int, cause: str) -> int | None:
        o = optuna()
        trial.set_user_attr("fail_cause", cause)
        trial.set_user_attr("ended", time.time())
        self.study.tell(trial, state=o.trial.TrialState.FAIL)
        log(f"trial {number} failed: {cause}")
        n, newest = failures_in_a_row(self.study.get_trials(deepcopy=False))
        limit = max_failures(self.search)
        if n >= limit:
            reason = f"{n} trials failed in a row: {newest}"
            self.study.set_user_attr("stopped", reason)
            log(f"stopping the study: {reason}")
            return 1
        return None

    def latest(self, d: Path) -> tuple[int, float] | None:
        """Rank 0's newest (step, metric), when it reported the metric."""
        for p in read_progress(str(d)):
            if p.rank == 0:
                value = p.metrics.get(self.search.metric)
                return (p.step, value) if value is not None else None
        return None

    def follow(self, trial, d: Path) -> int | None:
        """Report the ranks' progress to the pruner until the trial ends; the step at which it
        was pruned (its ranks signalled to save and end), or None."""
        last = None
        while self.child.poll() is None:
            try:  # back at once when the trial ends: the next one starts without a poll's delay
                self.child.wait(timeout=POLL)
            except subprocess.TimeoutExpired:
                pass
            if self.signalled is not None:
                continue
            seen = self.latest(d)
            if seen is None or seen[0] == last:
                continue
            last = seen[0]
            trial.report(seen[1], seen[0])
            if trial.should_prune():
                # SIGTERM: the trial's shell passes it to the ranks, which save and end (a plain
                # program without a handler just ends); the trial's script never requeues.
                self._signal_child(signal.SIGTERM)
                return seen[0]
        return None

    def final_value(self, d: Path) -> float | None:
        seen = self.latest(d)
        return seen[1] if seen else None

    def after_signal(self, number: int) -> int:
        """This worker was signalled while trial `number` ran: it stays RUNNING. On Slurm, a job
        that still runs (a preemption, the time-limit warning) is requeued: the next run of this
        worker resumes the trial; a cancelled or timed-out one just ends."""
        if self.requeue and self.backend.allocation_running(self.job):
            count = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
            if count < self.max_requeues:
                log(f"trial {number} saved; requeueing job {self.job} (requeue {count + 1} of at "
                    f"most {self.max_requeues})")
                try:
                    self.backend.requeue_allocation(self.job)
                except Exception as exc:  # the scheduler refused: the trial stays RUNNING
                    log(f"the requeue failed: {exc}")
                    return 75
                time.sleep(300)  # the scheduler ends this run now
                return 0
            log(f"not requeueing: job {self.job} has been requeued {count} time(s) "
                f"(preemption.max_requeues); `hpctrain submit --resume` continues the study")
        log(f"trial {number} stays RUNNING; `hpctrain submit --resume` continues the study")
        return 128 + int(self.signalled)



def main(argv: list[str], kind: type[Worker] = Worker, module: str = "hpctrain.search.worker") -> int:
    """`python -m MODULE RUN_DIR INDEX`: one worker of the study (a PBT member: kind=Member)."""
    if len(argv) != 2 or not argv[1].isdigit():
        print(f"usage: python -m {module} RUN_DIR WORKER", file=sys.stderr)
        return 2
    from ..errors import HpctrainError
    try:
        return kind(argv[0], int(argv[1])).run()
    except HpctrainError as exc:
        log(f"error: {exc.what}" + (f" (fix: {exc.fix})" if exc.fix else ""))
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A study's worker: one allocation of the job's shape (a Slurm array task, or a process on
the local site) running trials one after another, with no queue wait between them.

    python -m hpctrain.search.worker RUN_DIR WORKER

The loop: ask the study for a trial -> write trials/<n>/ and run its job script (the job's own
launch, inside this allocation) -> while it trains, feed the ranks' progress (the metric at
their step) to the pruner -> a pruned trial's ranks are signalled and save and end as on a
preemption, and it is told PRUNED -> tell the final value -> ask again. It stops asking when the
study has its trials or stopped itself (failures in a row); when its time left cannot fit another
trial, it requeues its allocation and the study goes on in the next (search/allocation.py).

A signal to this worker (preemption, the time-limit warning, scancel, `hpctrain cancel`) goes on
to the running trial, whose ranks save; the trial stays RUNNING in the study and, on Slurm, this
worker requeues its allocation while the job still runs (a preemption, the time-limit warning).
The requeued worker finds the RUNNING trial it owned (user attrs worker + job_id) and runs it
again in the same directory: the ranks resume from its newest checkpoint.
"""
from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from ..job.search import max_failures
from ..rank.records import read_job_failure
from . import journal, reading
from .allocation import Allocation, log
from ..runs.records import trial_dir
from .rules import SURPLUS, counts, trial_rel
from .spaces import distributions, optuna
from .trials import reported, study_search, write_trial

ADOPT = "adopt"  # a RUNNING trial `submit --resume` hands to the new worker of its index


def counted(trials) -> int:
    """Trials that count toward n_trials (rules.counts: not those run again)."""
    return sum(1 for t in trials if counts(t.user_attrs.get("fail_cause")))


def surplus(trials, number: int, n_trials: int) -> bool:
    """Whether trial `number` is beyond the study's n_trials: workers that ask at the same
    moment for the last trial each get one; the later numbers give theirs back."""
    ahead = [t for t in trials if t.number < number and counts(t.user_attrs.get("fail_cause"))]
    return len(ahead) >= n_trials


def failures_in_a_row(trials) -> tuple[int, str]:
    """Finished trials that failed, counted back from the newest finish; and the newest cause."""
    o = optuna()
    done = [t for t in trials if t.state.is_finished() and t.datetime_complete is not None
            and counts(t.user_attrs.get("fail_cause"))]
    done.sort(key=lambda t: t.datetime_complete)
    n, cause = 0, ""
    for t in reversed(done):
        if t.state != o.trial.TrialState.FAIL:
            break
        n += 1
        cause = cause or str(t.user_attrs.get("fail_cause", "failed"))
    return n, cause


class Worker:
    """The Optuna study's worker (search/methods.py: method optuna)."""

    def __init__(self, run_dir: str, index: int):
        self.run_dir = Path(run_dir)
        self.index = index
        self.study_job, self.search = study_search(run_dir)
        reading.load(run_dir, self.study_job.run_id)  # damage: one error, as `status` says it
        self.study = journal.load(run_dir, self.study_job.run_id, self.search, index)
        self.dists = distributions(self.search)
        self.alloc = Allocation.of_study(self.run_dir, self.study_job, index)

    @property
    def signalled(self) -> int | None:
        return self.alloc.signalled

    # --- the loop
    def run(self) -> int:
        self.alloc.install()
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
            if not self.alloc.fits_another():
                left = n_trials - counted(trials)
                if self.alloc.can_requeue():  # the study goes on in this worker's next allocation
                    return self.alloc.requeue(f"the time left cannot fit another trial ({left} "
                                              "not started yet)", for_time=True)
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
        # Signalled between two trials (the time-limit warning, a preemption): nothing to
        # save; the allocation is requeued as after a trial's save.
        return self.alloc.after_signal(f"worker {self.index}")

    def owned_running(self):
        o = optuna()
        mine = [t for t in self.study.get_trials(deepcopy=False, states=(o.trial.TrialState.RUNNING,))
                if t.user_attrs.get("worker") == self.index
                and (t.user_attrs.get("job_id") == self.alloc.ref or t.user_attrs.get(ADOPT))]
        return mine[0] if mine else None

    def run_trial(self, trial, number: int, params: dict, attempt: int) -> int | None:
        """Run one trial to its end; None to go on, or this worker's exit status."""
        o = optuna()
        if attempt == 1:
            trial.set_user_attr("started", time.time())
        for key, value in (("worker", self.index), ("nodes", self.alloc.nodes),
                           ("job_id", self.alloc.ref), ("attempts", attempt),
                           ("trial_dir", trial_rel(number))):
            trial.set_user_attr(key, value)
        try:
            script, _ = write_trial(self.run_dir, number, self.study_job, params)
        except Exception as exc:  # a value the job cannot take: this trial fails, not the study
            return self.fail(trial, number, f"could not prepare the trial: {exc}")
        log(f"trial {number}: {params}")
        try:
            self.alloc.start(number, script)
        except OSError as exc:
            return self.fail(trial, number, f"could not open its log: {exc}")
        pruned_at = self.follow(trial, trial_dir(self.run_dir, number))
        status = self.alloc.ended(by_itself=self.signalled is None)
        if self.signalled is not None:
            return self.alloc.after_signal(f"trial {number}")
        trial.set_user_attr("ended", time.time())
        if pruned_at is not None:
            trial.set_user_attr("pruned_step", pruned_at)
            self.study.tell(trial, state=o.trial.TrialState.PRUNED)
            log(f"trial {number}: pruned at step {pruned_at}")
            return None
        value = self.final_value(trial_dir(self.run_dir, number))
        if status != 0:
            failure = read_job_failure(str(trial_dir(self.run_dir, number)))
            cause = failure.message if failure and failure.message else f"exit status {status}"
            return self.fail(trial, number, f"{cause[:400]} (logs: {trial_rel(number)}/logs/)")
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

    def follow(self, trial, d: Path) -> int | None:
        """Report the ranks' progress to the pruner until the trial ends; the step at which it
        was pruned (its ranks signalled to save and end), or None."""
        last = None
        running = True
        while running:  # one more look once it has ended: what it reported last counts
            running = not self.alloc.wait()
            if self.signalled is not None:
                continue
            seen = reported(d, self.search.metric)
            if seen is None or seen[0] == last:
                continue
            last = seen[0]
            trial.report(seen[1], seen[0])
            if trial.should_prune():
                # SIGTERM: the trial's shell passes it to the ranks, which save and end (a plain
                # program without a handler just ends); the trial's script never requeues.
                self.alloc.signal(signal.SIGTERM)
                return seen[0]
        return None

    def final_value(self, d: Path) -> float | None:
        seen = reported(d, self.search.metric)
        return seen[1] if seen else None


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

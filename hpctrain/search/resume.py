"""`submit --resume STUDY`: the study continues where it stands. The RUNNING trials of workers
that are gone (the study ended, was cancelled, or a worker was killed) are run again from their
checkpoints by the new worker of the same index (user attr `adopt`); one whose ranks still run
here is marked FAIL "worker gone" instead (not counted toward n_trials: a new trial takes its
place). A stop the study made itself is lifted, and n_trials may grow
(`--set search.n_trials=N`)."""
from __future__ import annotations

from ..errors import HpctrainError
from . import journal, reading
from .spaces import optuna
from ..runs.records import trial_dir
from .rules import WORKER_GONE
from .trials import study_search
from .worker import ADOPT


def continue_study(run_dir, n_trials: int | None = None) -> int:
    """Returns how many RUNNING trials were marked gone (the others are adopted)."""
    o = optuna()
    study_job, search = study_search(run_dir)
    # Read first as `status` reads it (bounded, each record checked, replayed apart): a damaged
    # journal is one error naming the damage, before anything is written to it.
    reading.load(run_dir, study_job.run_id)
    study = journal.load(run_dir, study_job.run_id, search)
    if n_trials is not None:
        if n_trials < 1:
            raise HpctrainError(f"search.n_trials={n_trials}: a study needs at least one trial",
                                fix="--set search.n_trials=N with N > 0")
        study.set_user_attr("n_trials", n_trials)
    from ..backends.local import processes_of
    gone = 0
    for t in study.get_trials(deepcopy=False, states=(o.trial.TrialState.RUNNING,)):
        trial = o.trial.Trial(study, t._trial_id)  # no public way to reopen a trial by number
        if processes_of(trial_dir(run_dir, t.number)):
            # Its ranks still run here (a worker killed -9 leaves its trial running): not
            # run twice in one directory.
            trial.set_user_attr("fail_cause", WORKER_GONE)
            study.tell(t.number, state=o.trial.TrialState.FAIL)
            gone += 1
        else:
            # The new worker of the same index runs it again from its checkpoint.
            trial.set_user_attr(ADOPT, True)
    if study.user_attrs.get("stopped"):
        study.set_user_attr("stopped", "")
    return gone

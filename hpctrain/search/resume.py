"""`submit --resume STUDY`: the study continues where it stands. The RUNNING trials of workers
that are gone (the study ended, was cancelled, or a worker was killed) are marked FAIL "worker
gone" — not counted toward n_trials, so that many new trials take their place —, a stop the
study made itself is lifted, and n_trials may grow (`--set search.n_trials=N`)."""
from __future__ import annotations

from ..errors import HpctrainError
from . import journal
from .spaces import optuna
from .trials import read_study_job
from .worker import WORKER_GONE


def continue_study(run_dir, n_trials: int | None = None) -> int:
    """Returns how many RUNNING trials were marked gone."""
    import msgspec
    from ..schema.spec import Search
    o = optuna()
    study_job = read_study_job(run_dir)
    search = msgspec.convert(study_job.spec["search"], Search)
    study = journal.load(run_dir, study_job.run_id, search)
    if n_trials is not None:
        if n_trials < 1:
            raise HpctrainError(f"search.n_trials={n_trials}: a study needs at least one trial",
                                fix="--set search.n_trials=N with N > 0")
        study.set_user_attr("n_trials", n_trials)
    gone = 0
    for t in study.get_trials(deepcopy=False, states=(o.trial.TrialState.RUNNING,)):
        trial = o.trial.Trial(study, t._trial_id)  # no public way to reopen a trial by number
        trial.set_user_attr("fail_cause", WORKER_GONE)
        study.tell(t.number, state=o.trial.TrialState.FAIL)
        gone += 1
    if study.user_attrs.get("stopped"):
        study.set_user_attr("stopped", "")
    return gone

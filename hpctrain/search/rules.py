"""The rules a study's workers and everything that shows a study share, each stated once: which
trials count toward n_trials, which value is better, how runs rank by a direction; where a
trial (or a population's member) runs is runs/records.trial_dir (`logs` reads it too). A worker
and `status` that disagreed on one of them would show a study other than the one it ran."""
from __future__ import annotations

from ..runs.records import trial_dir

# A trial's fail_cause when no fault of its own ended it: it is run again, and does not count.
WORKER_GONE = "worker gone"  # its worker went away (kill -9, a lost node; search/resume.py)
SURPLUS = "surplus: asked for beyond n_trials"  # workers that asked at once for the last one


def trial_rel(number: int) -> str:
    """runs/records.trial_dir relative to the run directory (as a trial's records name it)."""
    return trial_dir("", number).as_posix()


def counts(fail_cause) -> bool:
    """Whether a trial with this fail_cause (None: it did not fail) counts toward n_trials."""
    return fail_cause not in (WORKER_GONE, SURPLUS)


def better(a: float, b: float, direction: str) -> bool:
    """Whether value `a` is better than `b` for a study that maximizes or minimizes."""
    return a < b if direction == "minimize" else a > b


def ranked(scores: dict, direction: str) -> list:
    """The keys of `scores`, best score first (ties: the lower key first)."""
    sign = 1 if direction == "minimize" else -1
    return sorted(scores, key=lambda k: (sign * scores[k], k))

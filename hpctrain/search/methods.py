"""How a study searches, one interface per method: Optuna's trials (`optuna`) and
population-based training (`pbt`). The CLI, the Python handle and submission ask a run's method
for what they need (its worker, the state it keeps, status, list, report, plot, best, resume)
and never which method it is; a third method (ASHA across workers, CMA-ES) is one more class
here, with its worker module."""
from __future__ import annotations

import abc
from pathlib import Path
from typing import ClassVar

import msgspec

from ..errors import HpctrainError
from ..runs.records import Run, trial_dir
from .trials import read_study_job


class Method(abc.ABC):
    """What a search method answers; a class that misses one cannot be made (abc)."""
    name: ClassVar[str]
    kind: ClassVar[str]  # what one is called in `list` and the key of its --json: study, population
    worker: ClassVar[str]  # the module each worker runs: python -m WORKER RUN_DIR INDEX

    def create(self, run_dir: Path, run_id: str, search) -> None:
        """At submit: the state the method keeps in the run directory, before any worker."""

    def resume(self, run_dir: Path, n_trials: int | None) -> None:
        """At `submit --resume`: the state made ready for the new workers."""

    @abc.abstractmethod
    def status(self, run: Run):
        """What `status` shows (a msgspec struct, also its --json)."""

    @abc.abstractmethod
    def format_status(self, found, workers: str | None = None) -> str:
        """`status`'s page of what status() found; workers: the scheduler's word for them."""

    @abc.abstractmethod
    def rows(self, run: Run) -> list:
        """Each trial's (or member's) row of status."""

    @abc.abstractmethod
    def listed(self, run: Run, budget: list[int]) -> tuple[str, object | None]:
        """`list`'s one phrase and the status it was made from (None: not read). budget: the
        bytes of study state the whole table may still read, charged here."""

    @abc.abstractmethod
    def report(self, run: Run):
        """What `report` shows: GPU-hours per trial or member (also its --json)."""

    @abc.abstractmethod
    def format_report(self, result) -> str:
        """`report`'s text of what report() found."""

    @abc.abstractmethod
    def plot(self, run: Run, out: str | None = None) -> str:
        """The figure `plot` draws; its PNG's path."""

    @abc.abstractmethod
    def best(self, run: Run):
        """What the search found so far; HpctrainError while there is nothing."""

    @abc.abstractmethod
    def best_files(self, run: Run) -> tuple[str, list[str], str]:
        """What `pull --best` copies: (the best trial's folder and the files outside it, both
        relative to the study's directory; a line that says which is best and by what)."""


class Optuna(Method):
    name, kind, worker = "optuna", "study", "hpctrain.search.worker"

    def create(self, run_dir, run_id, search):
        from . import journal
        journal.create(run_dir, run_id, search)

    def resume(self, run_dir, n_trials):
        from .resume import continue_study
        continue_study(run_dir, n_trials)

    def status(self, run):
        from . import follow
        return follow.status(run)

    def format_status(self, found, workers=None):
        from .show import format_study
        return format_study(found, workers=workers)

    def rows(self, run):
        return self.status(run).trials

    def listed(self, run, budget):
        from . import follow
        return follow.listed(run, budget)

    def report(self, run):
        from . import follow
        return follow.cost(run)

    def format_report(self, result):
        from .show import format_report
        return format_report(result)

    def plot(self, run, out=None):
        from .plot import plot
        return plot(run, out)

    def best(self, run):
        from . import follow
        return follow.best(run)

    def best_files(self, run):
        b = self.best(run)
        folder = trial_dir("", b.number).as_posix()
        return folder, [], f"trial {b.number}, {b.metric or 'value'} {b.value:.6g} ({b.direction})"


class Pbt(Method):
    """Its state is each member's lineage (pbt/lineage.py), written by the members: no Optuna
    journal."""
    name, kind, worker = "pbt", "population", "hpctrain.search.pbt.member"

    def resume(self, run_dir, n_trials):
        if n_trials is not None:
            raise HpctrainError("a population has no n_trials: each of its search.parallel "
                                "members trains to pbt.steps", fix="submit --resume RUN "
                                "without --set search.n_trials")

    def status(self, run):
        from .pbt.show import population
        return population(run)

    def format_status(self, found, workers=None):
        from .pbt.show import format_population
        return format_population(found, workers=workers)

    def rows(self, run):
        return self.status(run).members

    def listed(self, run, budget):
        from .pbt.cost import summary
        pop = self.status(run)
        return summary(pop), pop

    def report(self, run):
        from .pbt.cost import cost
        return cost(run)

    def format_report(self, result):
        from .pbt.cost import format_report
        return format_report(result)

    def plot(self, run, out=None):
        from .pbt.show import plot
        return plot(run, out)

    def best(self, run):
        from .pbt.show import best_member
        return best_member(run)

    def best_files(self, run):
        b = self.best(run)
        try:
            checkpoint = Path(b.checkpoint).relative_to(run.path).as_posix()
        except ValueError:
            raise HpctrainError(f"the best member's checkpoint {b.checkpoint} is not inside "
                                f"the population's directory {run.path}",
                                fix="restore the population's records (hpctrain writes them)") from None
        return (trial_dir("", b.member).as_posix(), [checkpoint],
                f"member {b.member}, {b.metric} {b.score:.6g} ({b.direction}) at step {b.step}")


METHODS: dict[str, Method] = {m.name: m for m in (Optuna(), Pbt())}


def named(name: str) -> Method:
    """The method `search.method` names (the schema admits only these)."""
    return METHODS[name]


def of(run: Run) -> Method:
    """The method of a study run, as its study/job.json says (untrusted: anything else, or a
    file that cannot be read, is Optuna's, whose reading then says what is wrong)."""
    try:
        search = read_study_job(run.path).spec.get("search") or {}
    except (OSError, ValueError, msgspec.DecodeError):
        return METHODS["optuna"]
    name = search.get("method") if isinstance(search, dict) else None
    return METHODS.get(name, METHODS["optuna"]) if isinstance(name, str) else METHODS["optuna"]

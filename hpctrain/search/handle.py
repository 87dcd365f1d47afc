"""A study from Python and Jupyter: a Handle on the study's run (status, wait, logs, cancel, as
for any run) that also answers what the study found.

    s = hpctrain.Study("20260101-120000-ab12")    # or the handle submit returned for a study
    s.best()            # Best(number=4, value=0.93, params={'agent.learning_rate': 3e-4}, ...)
    s.trials()          # every trial's checked row (follow.TrialRow)
    s.result()          # waits for the workers to end, then the best
    s.report(); s.plot()
    # a population (search.method pbt): best() is the best member (params, schedule, checkpoint),
    # population() every member, report() GPU-hours per member
    hpctrain.study_result("RUN")                  # the best, without a handle
"""
from __future__ import annotations

from ..follow.handle import Handle
from . import follow, methods
from .pbt import show as pbt_show


class Study(Handle):
    """A study's run: Handle's methods on its workers, and the study's own answers."""

    def __repr__(self) -> str:
        return f"<hpctrain study {self.run_id} on {self.run.record.site} at {self.run_dir}>"

    def best(self):
        """The best completed trial so far (follow.Best: number, value, params), or of a
        population its best member (pbt.show.BestMember: params, schedule, checkpoint);
        HpctrainError while there is none."""
        return methods.of(self.run).best(self.run)

    def population(self) -> pbt_show.Population:
        """A population's members, copies, best and schedule (`hpctrain status` of a PBT run)."""
        return pbt_show.population(self.run)

    def study_status(self):
        """What `hpctrain status STUDY --json` shows: every trial, the best, what is left
        (follow.StudyStatus; of a population, pbt.show.Population)."""
        return methods.of(self.run).status(self.run)

    def trials(self) -> list:
        """Every trial's checked row (follow.TrialRow; of a population, each member's)."""
        return methods.of(self.run).rows(self.run)

    def report(self) -> follow.StudyReport:
        """GPU-hours per trial and what pruning saved, or per member of a population
        (`hpctrain report STUDY`)."""
        return methods.of(self.run).report(self.run)

    def plot(self, metrics=None, out: str | None = None) -> str:
        """Every trial's curve and the best-so-far history (`hpctrain plot STUDY`); the PNG's
        path."""
        return methods.of(self.run).plot(self.run, out)

    def results(self, timeout: float | None = None) -> list:
        self.wait(timeout)
        return [self.best()]

    def result(self, timeout: float | None = None):
        """Wait for the study's workers to end, then its best trial."""
        return self.results(timeout)[0]


def study_result(ref) -> follow.Best:
    """The best trial of a study named by run id, directory or job id (as it stands now)."""
    return Study(ref).best()

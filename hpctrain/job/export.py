"""`hpctrain export RUN` off this machine or in a container: a 1-node, 1-task job derived from
the run (job/derived.py: its code, interpreter, container and site) whose program is the
exporter (rank/after/export.py, the derived job's own copy of the rank side, as the bootstrap
loads it), writing into the trained run's exports/ as the in-process export does.
"""
from __future__ import annotations

import msgspec

from ..follow.export import Chosen
from ..runs.records import Run
from ..schema.spec import slurm_seconds
from .derived import FromRun, from_run, new_place, one_rank
from .load import Job

EXPORT_MODULE = "_hpctrain_rank.after.export"
TIME = "00:30:00"  # an export takes seconds to minutes: the job must not hold the run's hours


class ExportPlan(msgspec.Struct, frozen=True, kw_only=True):
    job: Job
    run_id: str
    source: FromRun
    chosen: Chosen


def program(run: Run, chosen: Chosen) -> list[str]:
    """The bootstrap's program: the exporter's command line (follow/export.exporter_command's
    arguments), the checkpoint relative to the trained run."""
    return ["-m", EXPORT_MODULE, str(run.path), chosen.library, chosen.checkpoint, chosen.name,
            *([str(chosen.samples)] if chosen.samples else [])]


def plan(chosen: Chosen, time: str | None = None) -> ExportPlan:
    source = from_run(chosen.run)
    name = f"{source.job.spec.name[:52]}-export"
    run_id, _where = new_place(source, name)
    if time is None:
        # The run's limit when shorter (it passed the site's limits; a short slot starts sooner).
        own = source.job.spec.resources.time
        time = own if slurm_seconds(own) <= slurm_seconds(TIME) else TIME
    job = one_rank(source, name, program(chosen.run, chosen), {}, time)
    return ExportPlan(job=job, run_id=run_id, source=source, chosen=chosen)

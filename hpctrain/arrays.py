"""A sweep's task plans -> the one array script that runs them (Slurm job array, or locally).

Each task is already a complete job script in tasks/<i>/; the array script only chooses which
one runs (SLURM_ARRAY_TASK_ID), so a task behaves exactly as if submitted alone: its own run
directory, seed, config, SLURM_JOB_ID and therefore its own rendezvous port.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import __version__
from .errors import HpctrainError
from .plan import LaunchPlan
from .render import render_plan


@dataclass(frozen=True)
class ArrayPlan:
    name: str
    site: str
    scheduler: str
    run_dir: str
    directives: list[str]
    ntasks: int
    parallel: int
    task_script: str  # the file name of each task's script inside tasks/<i>/
    nnodes: int
    nproc_per_node: int
    version: str = __version__


def _shared(directives: list[str]) -> list[str]:
    return [d for d in directives if not d.startswith("--output=")]


def make_array_plan(run_dir: str, plans: list[LaunchPlan], parallel: int,
                    task_script: str) -> ArrayPlan:
    first = plans[0]
    for i, p in enumerate(plans[1:], 1):
        if _shared(p.directives) != _shared(first.directives):
            raise HpctrainError(
                f"sweep task {i} needs different #SBATCH directives than task 0 "
                f"({' '.join(_shared(p.directives))} vs {' '.join(_shared(first.directives))}), "
                "but a job array has one allocation shape", fix="keep resources out of the sweep")
    n = len(plans)
    directives = _shared(first.directives)
    directives.append(f"--output={run_dir}/logs/slurm-%A_%a.out")  # one log per task
    directives.append(f"--array=0-{n - 1}%{parallel}")
    return ArrayPlan(name=first.name, site=first.site, scheduler=first.scheduler, run_dir=run_dir,
                     directives=directives, ntasks=n, parallel=parallel, task_script=task_script,
                     nnodes=first.nnodes, nproc_per_node=first.nproc_per_node)


def render_array(plan: ArrayPlan) -> str:
    return render_plan(plan, "array.sh.j2")  # type: ignore[arg-type]

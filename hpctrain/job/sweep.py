"""A sweep's task plans -> the one array script that runs them (Slurm job array, or locally).

Each task is already a complete job script in tasks/<i>/; the array script only chooses which
one runs (SLURM_ARRAY_TASK_ID), so a task behaves exactly as if submitted alone: its own run
directory, seed, config, SLURM_JOB_ID and therefore its own rendezvous port.
"""
from __future__ import annotations

import msgspec

from .. import __version__
from .load import Job
from .machine import local_slots
from .plan import LaunchPlan


class ArrayPlan(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    site: str
    backend: str
    run_dir: str
    directives: list[tuple[str, str | None]]
    ntasks: int
    parallel: int
    task_script: str  # the file name of each task's script inside tasks/<i>/
    nnodes: int
    nproc_per_node: int
    version: str = __version__


def parallelism(job: Job, n: int) -> int:
    """Tasks at once: the sweep's `parallel`, else the site's array_parallelism, else all of
    them, where the local site's default is what this machine can run (job/machine.py)."""
    from ..backends import backend_class
    sweep = job.spec.sweep
    k = (sweep.parallel if sweep and sweep.parallel else None) or job.site.array_parallelism or n
    if backend_class(job.site.scheduler).runs_here:
        k = min(k, local_slots(job.spec))
    return max(1, min(k, n))


def make_array_plan(run_dir: str, first: LaunchPlan, ntasks: int, parallel: int,
                    task_script: str, waits: list[tuple[str, str | None]] = ()) -> ArrayPlan:
    """The array's directives are its first task's (a sweep varies nothing that changes them:
    checks.SWEEP_FIXED), with one log per task and the array's range; `waits` (the sweep's
    `after`, chains.directives) holds the whole array, not a task submitted again alone."""
    directives = [(k, v) for k, v in first.directives if k != "output"]
    if any(k == "output" for k, _ in first.directives):
        directives.append(("output", f"{run_dir}/logs/slurm-%A_%a.out"))
    directives += [w for w in waits if w not in directives]
    directives.append(("array", f"0-{ntasks - 1}%{parallel}"))
    return ArrayPlan(name=first.name, site=first.site, backend=first.backend, run_dir=run_dir,
                     directives=directives, ntasks=ntasks, parallel=parallel,
                     task_script=task_script, nnodes=first.nnodes,
                     nproc_per_node=first.nproc_per_node)

"""A sweep: one job file -> N task jobs, each a complete job of its own, run as ONE job array.

    sweep:
      grid: {env.LR: [0.1, 0.01], args: [[--small], [--big]]}   # cartesian product
      variants: [{env.ALGO: ppo}, {env.ALGO: sac}]               # another axis, explicit points
      seeds: [1, 2, 3]                                           # every point once per seed
      parallel: 2                                                # tasks running at once

Tasks are numbered grid-major (the last grid key varies fastest), then variants, then seeds.
A task is planned and rendered exactly like a single job (tasks/<i>/job.sbatch runs alone with
sbatch); the array script only picks the task's script by SLURM_ARRAY_TASK_ID. An array shares
one set of #SBATCH directives, so nothing that changes the allocation may vary.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from .errors import HpctrainError
from .loading import Job, load_job
from .spec import set_path

# Keys whose change would change the allocation or the run's identity.
FIXED = ("resources", "site", "name", "sweep", "runs_dir", "preemption", "python")


def expand(sweep) -> list[dict[str, Any]]:
    """The sweep's points as {key.path: value} dicts, in task order."""
    keys = list(sweep.grid)
    points = [dict(zip(keys, combo)) for combo in itertools.product(*(sweep.grid[k] for k in keys))]
    if sweep.variants:
        points = [{**p, **v} for p in points for v in sweep.variants]
    if sweep.seeds:
        points = [{**p, "seed": s} for p in points for s in sweep.seeds]
    return points


def check_keys(points: list[dict[str, Any]], job: Job) -> None:
    where = f"{job.source} (sweep)"
    for point in points:
        for key in point:
            top = key.split(".")[0]
            if top in FIXED:
                fix = ("an array shares one allocation: submit a separate job per resource "
                       "size (e.g. --set resources.nodes=N)" if top == "resources" else
                       f"remove '{key}' from the sweep")
                raise HpctrainError(f"the sweep varies '{key}', which must be the same for every "
                                    "task of a job array", where, fix)


@dataclass(frozen=True)
class Task:
    index: int
    values: dict[str, Any]  # what this task changes
    job: Job


def tasks(job: Job) -> list[Task]:
    """Every task of the job's sweep as a validated Job; [] when the job has no sweep."""
    sweep = job.spec.sweep
    if sweep is None:
        return []
    points = expand(sweep)
    if not points:
        raise HpctrainError("the sweep is empty", f"{job.source} (sweep)",
                            "give it grid, variants or seeds, or remove it")
    check_keys(points, job)
    limit = job.site.limits.max_array_size
    if limit is not None and len(points) > limit:
        raise HpctrainError(f"the sweep has {len(points)} tasks, but site '{job.site.name}' allows "
                            f"arrays of at most {limit}", f"{job.source} (sweep)",
                            "split it into several job files or shrink the grid")
    base = dict(job.raw)
    base.pop("sweep", None)
    base.pop("site", None)
    out = []
    for i, point in enumerate(points):
        data = base
        for key, value in point.items():
            data = set_path(data, tuple(key.split(".")), value)
        try:
            task_job = load_job(data, site=job.site_ref)
        except HpctrainError as exc:
            shown = ", ".join(f"{k}={v!r}" for k, v in point.items())
            raise HpctrainError(f"sweep task {i} ({shown}): {exc.what}", f"{job.source} (sweep)",
                                exc.fix) from None
        # The tasks run where the job file was loaded, whatever the current directory is now.
        out.append(Task(i, point, Job(spec=task_job.spec, site=task_job.site, source=job.source,
                                      workdir=job.workdir, site_ref=job.site_ref,
                                      warnings=task_job.warnings, raw=task_job.raw)))
    return out


def parallelism(job: Job, n: int) -> int:
    sweep = job.spec.sweep
    k = (sweep.parallel if sweep and sweep.parallel else None) or job.site.array_parallelism or n
    return max(1, min(k, n))


def table(task_list: list[Task]) -> list[str]:
    """Lines of `index  key=value ...` for --dry-run and `status`."""
    return [f"{t.index:>4}  " + "  ".join(f"{k}={v}" for k, v in t.values.items())
            for t in task_list]

"""The Python API behind the CLI: load, render, submit — the same calls for shell and notebook.

Dry-run is the first half of submit: `prepare` builds the very object that `submit` then
writes and hands to the backend, so what --dry-run prints is what is submitted.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import msgspec
from pathlib import Path

from . import __version__
from .backends import backend_for
from .errors import HpctrainError
from .loading import Job, load_job
from .plan import LaunchPlan, make_plan
from .render import render_plan
from .runs import Run, add_to_index, creating, git_state, new_run_id, run_path, write_atomic
from .spec import default_runs_dir

HERE = Path(__file__).parent
RANK_FILES = ("bootstrap.py", "cpu_mode.py", "preflight.py")  # copied into every run directory


class Prepared(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a submission consists of, before anything touches the disk or the scheduler."""
    job: Job
    plan: LaunchPlan
    script: str
    run_id: str
    run_dir: Path
    script_name: str
    submit_command: list[str]
    tasks: tuple["Prepared", ...] = ()  # a sweep's tasks, each a whole job in tasks/<i>/
    task_values: tuple[dict, ...] = ()  # what each task changes
    parallel: int | None = None  # a sweep's tasks running at once


def prepare(job: Job, run_id: str | None = None) -> Prepared:
    run_id = run_id or new_run_id()
    run_dir = run_path(default_runs_dir(job.spec), job.spec.name, run_id)
    if job.spec.sweep is not None:
        return _prepare_sweep(job, run_id, run_dir)
    return _prepare_one(job, run_id, run_dir)


def _prepare_sweep(job: Job, run_id: str, run_dir: Path) -> Prepared:
    from .arrays import make_array_plan, render_array
    from .sweep import parallelism, tasks
    task_list = tasks(job)
    subs = tuple(_prepare_one(t.job, run_id, run_dir / "tasks" / str(t.index)) for t in task_list)
    k = parallelism(job, len(subs))
    aplan = make_array_plan(str(run_dir), [s.plan for s in subs], k, subs[0].script_name)
    backend = backend_for(aplan.scheduler)
    return Prepared(job=job, plan=subs[0].plan, script=render_array(aplan), run_id=run_id,
                    run_dir=run_dir, script_name=backend.script_name,
                    submit_command=backend.submit_command(run_dir / backend.script_name),
                    tasks=subs, task_values=tuple(t.values for t in task_list), parallel=k)


def _prepare_one(job: Job, run_id: str, run_dir: Path) -> Prepared:
    plan = make_plan(job, str(run_dir))
    backend = backend_for(plan.scheduler)
    script_path = run_dir / backend.script_name
    return Prepared(job=job, plan=plan, script=render_plan(plan), run_id=run_id, run_dir=run_dir,
                    script_name=backend.script_name,
                    submit_command=backend.submit_command(script_path))


def render(job: Job, run_id: str = "RUN_ID") -> str:
    """The job script as it would be submitted (with a placeholder run id)."""
    return prepare(job, run_id).script


def _write_job_dir(prep: Prepared, d: Path) -> Path:
    import yaml
    (d / "logs").mkdir(parents=True)
    (d / "status").mkdir()
    write_atomic(d / "job.yaml", yaml.safe_dump(prep.job.resolved(), sort_keys=False))
    script = d / prep.script_name
    write_atomic(script, prep.script, mode=0o755)
    if prep.tasks:
        for sub in prep.tasks:
            _write_job_dir(sub, sub.run_dir)
        return script
    for name in RANK_FILES:
        if (HERE / name).exists():
            import shutil  # only when writing a run: it pulls bz2/lzma/zlib in
            shutil.copy2(HERE / name, d / name)
    write_atomic(d / "bootstrap.json", json.dumps(prep.plan.bootstrap, indent=2, sort_keys=True) + "\n")
    return script


def write_run_files(prep: Prepared, run: Run) -> Path:
    d = run.path
    script = _write_job_dir(prep, d)
    spec = prep.job.spec
    record = {
        "run_id": prep.run_id,
        "name": spec.name,
        "site": prep.job.site.name,
        "site_ref": prep.job.site_ref,
        "backend": prep.plan.scheduler,
        "library": spec.library,
        "nodes": prep.plan.nnodes,
        "procs_per_node": prep.plan.nproc_per_node,
        "script": prep.script_name,
        "source": prep.job.source,
        "workdir": prep.job.workdir,
        "job_id": None,
        "state": "SUBMITTING",
        "hpctrain_version": __version__,
        "git": git_state(prep.job.workdir),
    }
    if prep.tasks:
        record.update(array_size=len(prep.tasks), parallel=prep.parallel,
                      tasks=[dict(v) for v in prep.task_values])
    write_atomic(d / "run.json", json.dumps(record, indent=2, sort_keys=True) + "\n")
    return script


def submit_prepared(prep: Prepared) -> Run:
    """Write the run directory and submit. On any failure nothing is left behind: the directory
    is removed and a job that was already queued is cancelled."""
    backend = backend_for(prep.plan.scheduler)
    with creating(prep.run_dir) as run:
        script = write_run_files(prep, run)
        job_id = backend.submit(run, script)
        try:
            run.update(job_id=job_id, state="SUBMITTED",
                       submitted=_dt.datetime.now().astimezone().isoformat(timespec="seconds"))
            add_to_index(run)
        except BaseException:
            backend.abort(job_id)  # a queued job with no record of it would be an orphan
            raise
    return run


def submit(job: Job | str | os.PathLike, **load_args) -> Run:
    """Submit a Job (or a job file path, loaded with load_args) and return its run."""
    if not isinstance(job, Job):
        job = load_job(job, **load_args)
    return submit_prepared(prepare(job))


__all__ = ["Prepared", "prepare", "render", "submit", "submit_prepared", "HpctrainError"]

"""From a loaded job to a submitted run: prepare, write the run directory, hand it to a backend.

Dry-run is the first half of submit: `prepare` builds the very object that `submit_prepared`
then writes and hands to the backend, so what --dry-run prints is what is submitted. The CLI and
the Python API (hpctrain.submit, hpctrain.submit_function, hpctrain.render) all come through here.
"""
from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any, Callable

import msgspec

from . import __version__
from .backends import backend, backend_class
from .errors import HpctrainError
from .loading import Job, load_job
from .plan import LaunchPlan, make_plan
from .render import render_plan
from .runs import Run, add_to_index, creating, git_state, new_run_id, run_path, write_atomic
from .spec import default_runs_dir

RANK_DIR = Path(__file__).parent / "rank"  # copied into every run directory as RUN_DIR/rank/


class Prepared(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a submission consists of, before anything touches the disk or the scheduler."""
    job: Job
    plan: LaunchPlan
    script: str
    run_id: str
    run_dir: Path
    backend: str  # who submits it: the site's scheduler, or "submitit" for a function
    script_name: str
    submit_command: list[str]
    tasks: tuple["Prepared", ...] = ()  # a sweep's tasks, each a whole job in tasks/<i>/
    parallel: int | None = None  # a sweep's tasks running at once
    function: Any = None  # submitit runs: what every rank calls
    record: dict = msgspec.field(default_factory=dict)  # more run.json fields (function runs)


def prepare(job: Job, run_id: str | None = None, for_function: bool = False) -> Prepared:
    """The submission of a job, ready to write and submit. A job without a program (made for
    submit_function) can only run a function."""
    if not for_function and job.spec.library == "command" and not job.spec.script:
        raise HpctrainError("the job has no 'script': the program every rank runs",
                            job.source, "add e.g. script: train.py (a job without a script "
                            "can run a Python function: hpctrain.submit_function(fn, job))")
    run_id = run_id or new_run_id()
    run_dir = run_path(default_runs_dir(job.spec), job.spec.name, run_id)
    if job.tasks:
        return _prepare_sweep(job, run_id, run_dir)
    return _prepare_one(job, run_id, run_dir)


def _prepare_one(job: Job, run_id: str, run_dir: Path) -> Prepared:
    plan = make_plan(job, str(run_dir))
    cls = backend_class(plan.backend)
    return Prepared(job=job, plan=plan, script=render_plan(plan), run_id=run_id, run_dir=run_dir,
                    backend=plan.backend, script_name=cls.script_name,
                    submit_command=cls().submit_command(run_dir / cls.script_name, plan))


def _prepare_sweep(job: Job, run_id: str, run_dir: Path) -> Prepared:
    from .arrays import make_array_plan, parallelism
    from .chains import directives
    subs = tuple(_prepare_one(t.job, run_id, run_dir / "tasks" / str(t.index)) for t in job.tasks)
    k = parallelism(job, len(subs))
    waits = directives(job.after, job.spec.sbatch)
    aplan = make_array_plan(str(run_dir), subs[0].plan, len(subs), k, subs[0].script_name, waits)
    cls = backend_class(aplan.backend)
    return Prepared(job=job, plan=subs[0].plan, script=render_plan(aplan, "array.sh.j2"),
                    run_id=run_id, run_dir=run_dir, backend=aplan.backend,
                    script_name=cls.script_name,
                    submit_command=cls().submit_command(run_dir / cls.script_name, subs[0].plan),
                    tasks=subs, parallel=k)


def _write_job_dir(prep: Prepared, d: Path) -> Path | None:
    import yaml
    (d / "logs").mkdir(parents=True, exist_ok=True)
    (d / "status").mkdir(exist_ok=True)
    write_atomic(d / "job.yaml", yaml.safe_dump(prep.job.resolved(), sort_keys=False))
    script = None
    if prep.function is None:  # a function run has no script of its own: submitit writes one
        script = d / prep.script_name
        write_atomic(script, prep.script, mode=0o755)
    if prep.tasks:
        for sub in prep.tasks:
            _write_job_dir(sub, sub.run_dir)
        return script
    import shutil
    shutil.copytree(RANK_DIR, d / "rank", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    from .rank.records import write_json
    write_json(str(d / "bootstrap.json"), prep.plan.bootstrap)
    return script


def _record(prep: Prepared) -> dict:
    spec = prep.job.spec
    rec = dict(
        run_id=prep.run_id, name=spec.name, site=prep.job.site.name, site_ref=prep.job.site_ref,
        backend=prep.backend, library=spec.library, nodes=prep.plan.nnodes,
        procs_per_node=prep.plan.nproc_per_node,
        script=prep.script_name if prep.function is None else None,
        source=prep.job.source, workdir=prep.job.workdir, state="SUBMITTING",
        hpctrain_version=__version__, git=git_state(prep.job.workdir),
        after=[dict(d) for d in prep.job.after])
    if prep.tasks:
        rec.update(array_size=len(prep.tasks), parallel=prep.parallel,
                   task_values=[dict(t.values) for t in prep.job.tasks])
    rec.update(prep.record)
    return rec


def submit_prepared(prep: Prepared) -> Run:
    """Write the run directory and submit. On any failure nothing is left behind: the directory
    is removed and a job that was already queued is cancelled."""
    from .chains import check_live
    from .checks import check_secrets
    from .rank.records import RunRecord
    check_secrets(prep.job)
    check_live(prep.job)
    chosen = backend(prep.backend)
    with creating(prep.run_dir) as run:
        # Recorded and indexed before anything starts: a submit killed at any later instant
        # leaves a run that list/status/cancel find (status/_adopted finds its job, if any).
        RunRecord(**_record(prep)).save(str(run.path / "run.json"))
        add_to_index(run)
        _write_job_dir(prep, run.path)
        job_id = chosen.submit(run, prep)
        try:
            run.update(job_id=job_id, state="SUBMITTED",
                       submitted=_dt.datetime.now().astimezone().isoformat(timespec="seconds"))
            add_to_index(run)  # again, with the job id: the run is found by it from now on
        except BaseException as exc:
            chosen.abort(job_id)  # a queued job with no record of it would be an orphan
            if isinstance(exc, (HpctrainError, OSError)):
                what = exc.what if isinstance(exc, HpctrainError) else str(exc)
                raise HpctrainError(f"{what}; job {job_id} was cancelled, so that no job runs "
                                    "without a record", getattr(exc, "where", None),
                                    getattr(exc, "fix", None)) from None
            raise
    return run


def render(job: Job | str | os.PathLike | dict, **load_args) -> str:
    """The job script `hpctrain submit` would submit for this job (with a placeholder run id)."""
    return prepare(_as_job(job, load_args), "RUN_ID").script


def submit(job: Job | str | os.PathLike | dict, **load_args):
    """Submit a job (a Job, or a job file/dict loaded with load_args) exactly as `hpctrain
    submit` does; return a Handle on its run."""
    from .handle import Handle
    return Handle(submit_prepared(prepare(_as_job(job, load_args))))


def submit_function(fn: Callable, job: Job | str | os.PathLike | dict, *args: Any, **kwargs: Any):
    """Run fn(*args, **kwargs) on every rank of the job, through submitit; return a Handle.

    One submitit task per rank. Before fn is called each rank has RANK, LOCAL_RANK, WORLD_SIZE,
    LOCAL_WORLD_SIZE, MASTER_ADDR (the first node of the job's node list), MASTER_PORT (from the
    job id by the site's rule) and the bootstrap's set-up: the site's and job's env, threads,
    HPCTRAIN_SEED (+ random/numpy/torch seeded), CPU shims (cpu mode) or cuda:LOCAL_RANK pinned.
    fn creates the process group itself: dist.init_process_group("gloo" or "nccl").
    handle.result() is rank 0's return value. fn and its arguments are pickled (cloudpickle):
    functions from notebook cells work.
    """
    from .backends.submitit import function_run
    from .handle import Handle
    if not callable(fn):
        raise HpctrainError(f"submit_function needs a callable, got {type(fn).__name__}",
                            fix="submit_function(my_function, job, *args)")
    job = _as_job(job, {})
    if job.tasks:
        raise HpctrainError("submit_function runs one job, not a sweep", job.source,
                            "call it once per configuration, or submit the job file")
    prep = prepare(job, for_function=True)
    prep = msgspec.structs.replace(prep, **function_run(fn, args, kwargs, prep))
    return Handle(submit_prepared(prep))


def _as_job(job, load_args: dict) -> Job:
    if isinstance(job, Job):
        if load_args:
            raise HpctrainError(f"load arguments {sorted(load_args)} were given with an already "
                                "loaded job", fix="pass them to load_job(), or use "
                                "load_job(job, overrides=[...])")
        return job
    return load_job(job, **load_args)

"""From a loaded job to a submitted run: prepare, write the run directory, hand it to a backend.

Dry-run is the first half of submit: `prepare` builds the very object that `submit_prepared`
then writes and hands to the backend, so what --dry-run prints is what is submitted. The CLI and
the Python API (hpctrain.submit, hpctrain.submit_function, hpctrain.render) all come through here.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import msgspec

from . import __version__
from .backends import backend, backend_class, transport
from .errors import HpctrainError
from .job.load import Job, load_job
from .job.plan import LaunchPlan, make_plan
from .rendering.templates import render_plan
from .runs.records import (Run, add_to_index, creating, git_state, new_run_id, run_path, trial_dir,
                           write_atomic)
from .runs.snapshot import CODE_DIR
from .schema.spec import default_runs_dir, snapshot_settings

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
    # A sweep's tasks, each a whole job in tasks/<i>/ (a PreparedTasks: each made when first used).
    tasks: Sequence["Prepared"] = ()
    parallel: int | None = None  # a sweep's tasks running at once
    function: Any = None  # submitit runs: what every rank calls
    # Where the scheduler's tools run and the run lives (backends/transport.py): here, or through
    # a login node, where run_dir is the cluster's and `mirror` the directory here that keeps
    # run.json (None: run_dir is here).
    transport: Any = msgspec.field(default_factory=transport.Here)
    mirror: Path | None = None
    record: dict = msgspec.field(default_factory=dict)  # more run.json fields (function runs)
    snapshot: Any = None  # spec.Snapshot when the job runs a copy of its code (runs/snapshot.py)
    study_function: bytes | None = None  # a function study's pickled (fn, args, kwargs)


def prepare(job: Job, run_id: str | None = None, for_function: bool = False) -> Prepared:
    """The submission of a job, ready to write and submit. A job without a program (made for
    submit_function) can only run a function."""
    if not for_function and job.spec.library == "command" and not job.spec.script:
        raise HpctrainError("the job has no 'script': the program every rank runs",
                            job.source, "add e.g. script: train.py (a job without a script "
                            "can run a Python function: hpctrain.submit_function(fn, job))")
    run_id = run_id or new_run_id()
    where = transport.for_site(job.site)
    run_dir, mirror, workdir = where.place(run_path(default_runs_dir(job.spec), job.spec.name,
                                                    run_id), job.spec.name, run_id)
    # A function travels pickled (submitit): there is no script tree to copy for it.
    settings = snapshot_settings(job.spec) if where.snapshots_code and not for_function else None
    if settings is not None and not settings.enabled:
        settings = None
    code_dir = str(run_dir / CODE_DIR) if settings is not None else None
    if job.tasks:
        prep = _prepare_sweep(job, run_id, run_dir, code_dir, settings, workdir)
    elif job.spec.search is not None:
        prep = _prepare_study(job, run_id, run_dir, code_dir, settings, workdir)
    else:
        prep = _prepare_one(job, run_id, run_dir, code_dir, settings, workdir)
    return msgspec.structs.replace(prep, transport=where, mirror=mirror,
                                   submit_command=where.command(prep.submit_command))


def _prepare_one(job: Job, run_id: str, run_dir: Path, code_dir: str | None = None,
                 settings=None, workdir: str | None = None) -> Prepared:
    # workdir: where the job runs from on the cluster, when that is not where it was loaded
    plan = make_plan(job if workdir is None else msgspec.structs.replace(job, workdir=workdir),
                     str(run_dir), code_dir)
    chosen = backend_class(plan.backend)()
    return Prepared(job=job, plan=plan, script=render_plan(plan, chosen.header(plan.directives)),
                    run_id=run_id, run_dir=run_dir,
                    backend=plan.backend, script_name=chosen.script_name,
                    submit_command=chosen.submit_command(run_dir / chosen.script_name, plan),
                    snapshot=settings)


class PreparedTasks(Sequence):
    """A sweep's prepared tasks, each planned and rendered when it is first used, then kept.

    The array script needs only the first task's plan, so `hpctrain render`, `validate` and
    `submit --dry-run` plan and render one task, not one per task; a submit writes every task's
    script and so prepares each (once). Every task was validated when the job was loaded, and
    planning raises no user error (job/plan.py), so preparing later reports nothing it would have
    reported sooner; what a task is depends only on the frozen job and the run id and directories
    fixed by prepare(), not on when it is made."""

    def __init__(self, make: Callable[[int], "Prepared"], count: int):
        self._make = make
        self._made: list = [None] * count

    def __len__(self) -> int:
        return len(self._made)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if self._made[i] is None:
            self._made[i] = self._make(range(len(self))[i])
        return self._made[i]


def _prepare_sweep(job: Job, run_id: str, run_dir: Path, code_dir: str | None,
                   settings, workdir: str | None = None) -> Prepared:
    from .job.sweep import make_array_plan, parallelism
    from .job.chains import directives

    def task(i: int) -> Prepared:
        # One snapshot for the whole sweep, in its run directory: every task runs the same code.
        t = job.tasks[i]
        return _prepare_one(t.job, run_id, run_dir / "tasks" / str(t.index), code_dir,
                            workdir=workdir)
    subs = PreparedTasks(task, len(job.tasks))
    k = parallelism(job, len(subs))
    waits = directives(job.after, job.spec.sbatch)
    aplan = make_array_plan(str(run_dir), subs[0].plan, len(subs), k, subs[0].script_name, waits)
    chosen = backend_class(aplan.backend)()
    return Prepared(job=job, plan=subs[0].plan,
                    script=render_plan(aplan, chosen.header(aplan.directives), "array.sh.j2"),
                    run_id=run_id, run_dir=run_dir, backend=aplan.backend,
                    script_name=chosen.script_name,
                    submit_command=chosen.submit_command(run_dir / chosen.script_name, subs[0].plan),
                    tasks=subs, parallel=k, snapshot=settings)


def _prepare_study(job: Job, run_id: str, run_dir: Path, code_dir: str | None,
                   settings, workdir: str | None = None) -> Prepared:
    """A study (search:): one script that starts its workers (hpctrain/search/worker.py); each
    trial's own script is written by its worker, from study/job.json (search/trials.py)."""
    import sys
    from .job.search import StudyPlan, first_values, study_directives
    from .search import methods
    from .search.trials import StudyJob, trial_job
    search = job.spec.search
    python = [sys.executable]
    study = StudyJob(run_id=run_id, spec=job.resolved(), site=job.site, site_ref=job.site_ref,
                     source=job.source, workdir=workdir or job.workdir, code_dir=code_dir,
                     python=python)
    first = _prepare_one(trial_job(study, first_values(search), job.spec.preemption.requeue),
                         run_id, trial_dir(run_dir, 0), code_dir, workdir=workdir)
    chosen = backend_class(first.backend)()
    splan = StudyPlan(name=job.spec.name, site=job.site.name, backend=first.backend,
                      run_dir=str(run_dir), parallel=search.parallel, n_trials=search.n_trials,
                      directives=study_directives(first.plan, str(run_dir), search.parallel),
                      nnodes=first.plan.nnodes, nproc_per_node=first.plan.nproc_per_node,
                      python=python, version=__version__,
                      worker=methods.named(search.method).worker)
    # The first trial's job is made from the study's without its checks: the warnings that
    # `validate` shows (the study's own, PBT's ignored keys among them) are the study job's.
    plan = msgspec.structs.replace(first.plan, warnings=job.warnings)
    return Prepared(job=job, plan=plan,
                    script=render_plan(splan, chosen.header(splan.directives), "study.sh.j2"),
                    run_id=run_id, run_dir=run_dir, backend=first.backend,
                    script_name=chosen.script_name,
                    submit_command=chosen.submit_command(run_dir / chosen.script_name, first.plan),
                    snapshot=settings,
                    record={"kind": "study", "parallel": search.parallel,
                            "extra": {"python": list(first.plan.host_python),
                                      "study": {"n_trials": search.n_trials,
                                                "parallel": search.parallel,
                                                "metric": search.metric,
                                                "direction": search.direction,
                                                "python": python}}})


def snapshot_source(prep: Prepared):
    """What the snapshot of a prepared submission copies (snapshot.Source), size checked; None
    when the job runs the live tree. Nothing is written."""
    if prep.snapshot is None:
        return None
    from .runs import snapshot
    from .runs.records import state_home
    skip = [default_runs_dir(prep.job.spec), str(state_home())]
    source = snapshot.collect(prep.job.workdir, prep.snapshot, skip)
    where = prep.job.origins(("snapshot",)) if prep.job.origins is not None else prep.job.source
    snapshot.check_size(source, prep.snapshot, where)
    _check_program_in(source, prep)
    return source


def _program_files(prep: Prepared) -> list[tuple[str, str, str]]:
    """(what, path as the job names it, its key) of the files the ranks open from the snapshot: the
    script, a config file, and arguments that name a file of the working directory. Absolute
    paths are left out: the ranks open them where they are, not in the copy."""
    spec, workdir = prep.job.spec, prep.job.workdir
    named = []
    if spec.script and not spec.script.startswith("-"):
        named.append(("the job's script", spec.script, "script"))
    if getattr(spec, "config", None):
        named.append(("the job's config", spec.config, "config"))
    for arg in map(str, spec.args):
        value = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg
        looks_like_file = os.sep in value or value.endswith(
            (".py", ".yaml", ".yml", ".json", ".toml", ".cfg", ".ini"))
        if value and not value.startswith("-") and looks_like_file:
            if not os.path.isabs(value) and os.path.isfile(os.path.join(workdir, value)):
                named.append((f"the argument {arg!r}" if arg != value else "the argument",
                              value, "args"))
    return [n for n in named if not os.path.isabs(n[1])]


def _check_program_in(source, prep: Prepared) -> None:
    """A file the ranks open from the snapshot (RUN_DIR/code/...) that the snapshot does not
    hold fails every rank with FileNotFoundError once the job starts: refused here instead."""
    from .runs import snapshot
    workdir = prep.job.workdir
    for what, named, key in _program_files(prep):
        path = os.path.normpath(os.path.join(workdir, named))
        if not os.path.exists(path):
            continue  # a missing script is the checks' to report (or made by the setup lines)
        rel = os.path.relpath(path, source.root)
        if rel.startswith(".." + os.sep) or rel == "..":
            why = f"it is outside the snapshot's root {source.root}, which is all the run copies"
            fix = (f"move it under {source.root}, or set snapshot: false (the job then runs "
                   "the live tree)")
        elif snapshot.holds(source, rel):  # a file under a linked directory too
            continue
        else:
            why, fix = snapshot.left_out(source, rel, prep.snapshot)
        where = prep.job.origins((key,)) if prep.job.origins is not None else prep.job.source
        raise HpctrainError(f"{what} {named} is not in the code snapshot the run executes: {why}",
                            where, fix)


def collisions(prep: Prepared) -> list[str]:
    """What the scheduler's calendar says against the job before it is submitted (a
    maintenance its time limit runs into): warnings; HpctrainError when it can never start."""
    with transport.scheduler_tools(prep.transport, prep.run_dir):
        return backend_class(prep.backend)().collisions(prep.plan)


def test_start(prep: Prepared) -> str | None:
    """`submit --dry-run`: where and when the scheduler would start the job, if it can say."""
    with transport.scheduler_tools(prep.transport, prep.run_dir):
        return backend_class(prep.backend)().test_start(prep.script)


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
            _write_job_dir(sub, d / sub.run_dir.relative_to(prep.run_dir))
        return script
    if prep.job.spec.search is not None:  # each trial's directory is its worker's to write
        from .search import methods, trials
        code_dir = str(prep.run_dir / CODE_DIR) if prep.snapshot is not None else None
        trials.write_study_job(d, prep.job, prep.run_id, code_dir,
                               prep.record["extra"]["study"]["python"])
        search = prep.job.spec.search
        methods.named(search.method).create(d, prep.run_id, search)
        if prep.study_function is not None:  # read by each trial's search/call.py
            from .rank.records import write_file
            from .search.call import FUNCTION
            write_file(str(d / FUNCTION), prep.study_function, str(d))  # whole, never via a link
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
        after=[dict(d) for d in prep.job.after],
        # The interpreter the job runs its copy of the rank side with on the nodes, outside any
        # container: `attach --stacks` runs that copy with it (follow/attach.py).
        extra={"python": list(prep.plan.host_python)})
    if prep.tasks:
        rec.update(array_size=len(prep.tasks), parallel=prep.parallel,
                   task_values=[dict(t.values) for t in prep.job.tasks])
    rec.update(prep.record)
    # From the first write: a killed submit's job is looked for where the transport says.
    rec["extra"] = dict(rec.get("extra") or {}, **prep.transport.record(prep.run_dir))
    return rec


@contextlib.contextmanager
def write_run(prep: Prepared, source=None, extra: dict | None = None):
    """The run directory of a prepared submission, written, recorded and indexed before anything
    starts (a submit killed at any later instant leaves a run that list/status/cancel find;
    status/_adopted finds its job, if any), held while the block runs and removed if it fails.
    `source`: the code snapshot's listing (snapshot_source); `extra`: more run.json extra keys."""
    from .rank.records import RunRecord
    with creating(prep.mirror or prep.run_dir) as run:
        record = _record(prep)
        record["extra"].update(extra or {})
        if source is not None:
            record["snapshot"] = source.record(run.path)
        RunRecord(**record).save(str(run.path / "run.json"))
        add_to_index(run)
        if source is not None:
            from .runs.snapshot import copy
            copy(source, run.path)
        _write_job_dir(prep, run.path)
        yield run


def submit_prepared(prep: Prepared, source=None, warned: list[str] | None = None) -> Run:
    """Write the run directory and submit. On any failure nothing is left behind: the directory
    is removed and a job that was already queued is cancelled. `source`: the snapshot's
    listing when the caller already made it (snapshot_source); `warned`: collisions(prep)'s
    warnings when the caller already asked and showed them (else they go to warnings.warn)."""
    from .job.chains import check_live
    from .job.checks import check_local_gpus, check_secrets
    from .job import video
    check_secrets(prep.job)
    if backend_class(prep.backend).runs_here:
        check_local_gpus(prep.job)
    video.check(prep.job)
    check_live(prep.job)
    if warned is None:
        import warnings
        for text in collisions(prep):  # a job that can never start is refused here
            warnings.warn(text, stacklevel=2)
    if source is None:
        source = snapshot_source(prep)  # before anything is written: too big is refused here
    chosen = prep.transport.backend(backend(prep.backend), prep.run_dir)
    with write_run(prep, source) as run:
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


def _max_excluded(run: Run) -> int:
    """preemption.max_excluded_nodes of the run's job (its resolved job.yaml)."""
    from .runs.untrusted import job_doc
    from .schema.spec import Preemption
    try:  # a regular file, bounded (a FIFO there must not hang submit --resume)
        value = (job_doc(run.path).get("preemption") or {}).get("max_excluded_nodes")
    except (HpctrainError, AttributeError):
        value = None
    return value if isinstance(value, int) and value >= 0 else Preemption().max_excluded_nodes


def resume(ref: str, n_trials: int | None = None) -> tuple[Run, list[str], str]:
    """`hpctrain submit --resume RUN`: a new allocation for a run that ended (time limit,
    requeue cap, failure), in the same run directory: its job script runs the run's code
    snapshot again and every rank resumes from the newest checkpoint. The nodes the run's
    failures blamed are left out (rank/end/recovery.py). Returns (run, excluded nodes, why)."""
    from .rank.records import archive_job_failure
    from .rank.end.recovery import resume_exclusions
    from .runs.records import find
    from .follow.status import gather
    from .backends import for_run
    from .runs.untrusted import NODE, job_secrets
    run = find(ref)
    rec = run.record
    chosen = for_run(run)  # the run's own backend, through its login node when it has one
    # The same secrets check as submit, and first: a resumed job takes them from here too.
    missing = [n for n in job_secrets(run.path) if not os.environ.get(n)]
    if missing:
        raise HpctrainError(f"secret(s) {', '.join(missing)} not set in this environment: run "
                            f"{run.id}'s job takes them from where it is resumed",
                            f"{run.path / 'job.yaml'}: secrets",
                            f"export {missing[0]}=... before `hpctrain submit --resume "
                            f"{run.id}` (its value is never written to disk)")
    if rec.array_size:
        raise HpctrainError(f"run {run.id} is a sweep: --resume starts one job again",
                            fix="submit the sweep's job file again")
    if rec.script is None or not (run.path / rec.script).is_file():
        raise HpctrainError(f"run {run.id} has no job script to run again (a function run?)",
                            fix="submit the job (or call submit_function) again")
    st = gather(run)
    if not st.state.done:
        raise HpctrainError(f"run {run.id} is still {st.state.state.value} (job {rec.job_id}): "
                            "only a run that ended can be resumed",
                            fix=f"wait for it, or `hpctrain cancel {run.id}` first")
    nodes, why = resume_exclusions(str(run.path), _max_excluded(run))
    bad = [n for n in nodes if not NODE.fullmatch(n)]
    if bad:  # the failure records name them: data, checked before they reach sbatch
        raise HpctrainError(f"{run.path / 'status'}: the node name {bad[0][:60]!r} the run's "
                            "failure records give is not a node name",
                            fix="restore or remove status/failure.json and status/excluded.json")
    if rec.kind == "study":
        from .search import methods
        methods.of(run).resume(run.path, n_trials)
    elif n_trials is not None:
        raise HpctrainError(f"run {run.id} is not a study: --set search.n_trials is for one",
                            fix=f"hpctrain submit --resume {run.id}")
    archive_job_failure(str(run.path))  # failure.json speaks of the new job from now on
    job_id = chosen.resubmit(run, nodes)
    # cancelled=None: a run cancelled and resumed is not cancelled (a state read from it later
    # must not say so, and a second cancel records its own time).
    run.update(jobs=[*rec.jobs, str(rec.job_id)], job_id=job_id, state="SUBMITTED", final=False,
               exit_code=None, reason=None, task_states=[], cancelled=None,
               submitted=_dt.datetime.now().astimezone().isoformat(timespec="seconds"))
    add_to_index(run)
    return run, nodes, why


def render(job: Job | str | os.PathLike | dict, **load_args) -> str:
    """The job script `hpctrain submit` would submit for this job (with a placeholder run id)."""
    return prepare(_as_job(job, load_args), "RUN_ID").script


def submit(job: Job | str | os.PathLike | dict, **load_args):
    """Submit a job (a Job, or a job file/dict loaded with load_args) exactly as `hpctrain
    submit` does; return a Handle on its run (for a job with a search: section, a Study,
    whose best() is its best trial)."""
    from .follow.handle import Handle
    job = _as_job(job, load_args)
    run = submit_prepared(prepare(job))
    if job.spec.search is not None:
        from .search.handle import Study
        return Study(run)
    return Handle(run)


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
    from .follow.handle import Handle
    if not callable(fn):
        raise HpctrainError(f"submit_function needs a callable, got {type(fn).__name__}",
                            fix="submit_function(my_function, job, *args)")
    job = _as_job(job, {})
    if job.tasks:
        raise HpctrainError("submit_function runs one job, not a sweep", job.source,
                            "call it once per configuration, or submit the job file")
    if job.spec.search is not None:
        from .search.handle import Study
        return Study(submit_prepared(prepare_function_study(fn, job, args, kwargs)))
    prep = prepare(job, for_function=True)
    prep = msgspec.structs.replace(prep, **function_run(fn, args, kwargs, prep))
    return Handle(submit_prepared(prep))


def prepare_function_study(fn: Callable, job: Job, args: tuple, kwargs: dict) -> Prepared:
    """A study whose trials run fn: each trial is the job's own launch (search/worker.py) of
    search/call.py, which calls fn(*args, **kwargs, **the trial's KEY=VALUE args) on every rank.
    fn travels pickled in study/function.pkl (cloudpickle, as submit_function's does)."""
    import cloudpickle

    from .backends.submitit import check_picklable, describe_callable
    from .search import call
    info = describe_callable(fn)
    check_picklable(fn, args, kwargs, info)
    runner = str(Path(call.__file__).resolve())
    spec = msgspec.structs.replace(job.spec, script=runner, library="command")
    prep = prepare(msgspec.structs.replace(job, spec=spec), for_function=True)
    return msgspec.structs.replace(prep, study_function=cloudpickle.dumps((fn, args, kwargs)),
                                   record=dict(prep.record, function=info))


def _as_job(job, load_args: dict) -> Job:
    if isinstance(job, Job):
        if load_args:
            raise HpctrainError(f"load arguments {sorted(load_args)} were given with an already "
                                "loaded job", fix="pass them to load_job(), or use "
                                "load_job(job, overrides=[...])")
        return job
    return load_job(job, **load_args)

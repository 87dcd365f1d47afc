"""A trial's run directory, trials/<number:04d>/: the study's job with the trial's values in it,
planned and rendered as any job is (job/plan.py, templates/), so that a trial is the job's own
launch — its torchrun per node, its checkpoints, its progress and logs where `status`, `logs`
and the sampler look for a run's.

The study's job is kept at submit in study/job.json (the resolved job, the site profile, where
it runs): the worker reads it back typed and bounded, as untrusted data, and re-validates every
value through the schema; it never looks the site up again.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec

from .. import rank as rank_package
from ..backends import backend_class
from ..job.load import Job
from ..job.plan import make_plan
from ..job.search import trial_spec
from ..rendering.templates import render_plan
from ..runs import tree
from ..rank.records import read_progress
from ..runs.records import trial_dir, write_atomic
from ..errors import HpctrainError
from ..runs.untrusted import nested_within, read_regular
from ..schema.spec import Preemption, Search, SiteProfile

STUDY_JOB = "study/job.json"
RANK_DIR = Path(rank_package.__file__).parent


class StudyJob(msgspec.Struct, kw_only=True):
    """study/job.json: what a worker needs to make each trial's job."""
    run_id: str
    spec: dict  # the resolved job (job.yaml's content), search: included
    site: SiteProfile
    site_ref: str
    source: str
    workdir: str
    code_dir: str | None = None
    python: list[str] = []  # hpctrain's own interpreter (with Optuna): the workers'


def write_study_job(run_dir: Path, job: Job, run_id: str, code_dir: str | None,
                    python: list[str]) -> None:
    data = StudyJob(run_id=run_id, spec=job.resolved(), site=job.site, site_ref=job.site_ref,
                    source=job.source, workdir=job.workdir, code_dir=code_dir, python=python)
    write_atomic(run_dir / STUDY_JOB, msgspec.json.encode(data).decode(), root=run_dir)


def read_study_job(run_dir) -> StudyJob:
    """study/job.json, typed: OSError (not a regular file, too large) or ValueError (not a
    study's job: not JSON, a wrong type, nested too deeply)."""
    path = Path(run_dir) / STUDY_JOB
    try:
        job = msgspec.json.decode(read_regular(path, 8 << 20), type=StudyJob)
    except RecursionError:  # msgspec's own stop for deep nesting
        raise msgspec.ValidationError(f"{path}: nested too deeply") from None
    if not nested_within(job.spec):
        raise msgspec.ValidationError(f"{path}: nested too deeply")
    return job


def study_search(run_dir) -> tuple[StudyJob, Search]:
    """The study's job and its search: section, checked again; HpctrainError naming the file."""
    path = Path(run_dir) / STUDY_JOB
    try:
        job = read_study_job(run_dir)
        return job, msgspec.convert(job.spec.get("search"), Search)
    except (OSError, ValueError) as exc:
        raise HpctrainError(f"cannot read the study's job {path}: "
                            f"{getattr(exc, 'strerror', None) or exc}",
                            fix="restore it (hpctrain writes it at submit) or submit the job "
                            "again") from None


def study_preemption(study: StudyJob) -> Preemption:
    """The study's preemption: settings, typed by the schema (its defaults where the job gave
    none); HpctrainError when study/job.json holds what the schema refuses."""
    try:
        return msgspec.convert(study.spec.get("preemption") or {}, Preemption)
    except msgspec.ValidationError as exc:
        raise HpctrainError(f"the study's job {STUDY_JOB}: preemption: {exc}",
                            fix="restore it (hpctrain writes it at submit) or submit the job "
                            "again") from None


def trial_job(study: StudyJob, values: dict, requeue: bool) -> Job:
    """The trial's whole job. requeue False: a worker requeues its allocation itself (a trial's
    script must not requeue the worker's job when the worker stops it for the pruner)."""
    spec = trial_spec(study.spec, values)
    pre = msgspec.structs.replace(spec.preemption, requeue=requeue)
    spec = msgspec.structs.replace(spec, preemption=pre, after=[])
    return Job(spec=spec, site=study.site, source=study.source, workdir=study.workdir,
               site_ref=study.site_ref)


def write_trial(run_dir, number: int, study: StudyJob, values: dict, requeue: bool = False):
    """Write trials/<number>/ (again, on a resumed attempt: its checkpoints stay); returns
    (the job script's path, the plan)."""
    d = trial_dir(run_dir, number)
    plan = make_plan(trial_job(study, values, requeue), str(d), study.code_dir)
    chosen = backend_class(plan.backend)()
    # Everything below the study's directory is made and written without following a link
    # (runs/tree.py, rank/records.replacing): a link planted as trials/<n> or one of its
    # folders fails this trial with that cause (OSError), and nothing is written through it.
    for sub in ("logs", "status"):
        tree.make_dirs(d / sub, run_dir)
    script = d / chosen.script_name
    write_atomic(script, render_plan(plan, chosen.header(plan.directives)), mode=0o755,
                 root=run_dir)
    write_atomic(d / "params.json", json.dumps(values, sort_keys=True) + "\n", root=run_dir)
    write_atomic(d / "job.yaml", _yaml(study, values), root=run_dir)
    # Copied whole, then put in place: a worker killed mid-copy leaves a partial copy under its
    # hidden name, which the next attempt of the trial (adopted or requeued) removes.
    fresh = d / f".rank-{os.getpid()}"
    tree.remove(fresh, run_dir)
    tree.copy_tree(RANK_DIR, fresh, run_dir)
    tree.remove(d / "rank", run_dir)  # a link there goes itself: what it points at stays
    tree.rename(fresh, d / "rank", run_dir)
    from ..rank.records import write_json
    write_json(str(d / "bootstrap.json"), plan.bootstrap, root=str(run_dir))
    return script, plan


def _yaml(study: StudyJob, values: dict) -> str:
    import yaml
    return yaml.safe_dump(msgspec.to_builtins(trial_spec(study.spec, values)), sort_keys=False)


def reported(d: Path, metric: str) -> tuple[int, float] | None:
    """Rank 0's newest (step, value of `metric`) in a trial's directory, when it reported it."""
    for p in read_progress(str(d)):
        if p.rank == 0:
            value = p.metrics.get(metric)
            return (p.step, value) if value is not None else None
    return None

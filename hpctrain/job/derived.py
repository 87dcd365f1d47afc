"""A job derived from a run: what runs after training (evaluate, export, video) runs the run's own
code snapshot, interpreter, container, environment and site, on one node with one rank.

The run's job is read back from its job.yaml (untrusted, bounded: runs/untrusted.job_doc) and
validated again as any job file, on the site the run was submitted to; the derived job is that
job with its program, shape and bookkeeping replaced, validated once more. Nothing read from the
run becomes a command: the program is the caller's, the rest passes the schema's checks.
"""
from __future__ import annotations

import shlex
from pathlib import Path

import msgspec

from ..errors import HpctrainError
from ..runs.records import Run, new_run_id, run_path
from ..runs.snapshot import CODE_DIR
from ..runs.untrusted import job_doc
from ..libraries import adapter
from .checks import runs_isaaclab
from .load import Job, Task, load_job
from .plan import make_plan

# Keys of the run's job that say how it trained, not what it runs: a derived job has none.
_TRAINING_ONLY = ("sweep", "search", "after", "notify", "idle_gpus", "sample_every")


class FromRun(msgspec.Struct, frozen=True, kw_only=True):
    """A run as the jobs derived from it see it."""
    run: Run
    job: Job  # the run's job, validated again
    doc: dict  # its resolved job.yaml
    workdir: str  # where its program ran: inside its code snapshot, or the live tree
    python: list[str]  # the interpreter its ranks ran

    @property
    def runs_dir(self) -> str:
        return str(self.run.path.parent.parent)


def from_run(run: Run) -> FromRun:
    rec = run.record
    if rec.extra.get("remote") or rec.extra.get("rest"):
        raise HpctrainError(f"run {run.id} lives on a cluster reached through "
                            f"{'a login node' if rec.extra.get('remote') else 'slurmrestd'}: "
                            "its checkpoints are there, not here",
                            fix="run this command on that cluster's login node")
    ssh = rec.extra.get("ssh")
    if isinstance(ssh, dict) and ssh.get("sync") == "rsync":
        raise HpctrainError(f"run {run.id} ran on workstations without a shared file system "
                            "(sync: rsync): a job derived from it would write its results into "
                            "the hosts' copies of the run, which are not brought back",
                            fix="evaluate on a site whose run directories the hosts share "
                            "(sync: shared), or copy the checkpoint into a run there")
    if rec.kind != "command" or rec.array_size or rec.script is None:
        what = "a sweep" if rec.array_size else f"a {rec.kind} run"
        raise HpctrainError(f"run {run.id} is {what}: a job derived from a run is derived "
                            "from one trained job", fix="name a run of one job (a sweep's tasks "
                            "and a study's trials are not evaluated one by one yet)")
    doc = job_doc(run.path)
    if not doc:
        raise HpctrainError(f"run {run.id} has no job.yaml to derive a job from",
                            fix="restore it (hpctrain writes it at submit)")
    try:
        job = load_job(doc, site=rec.site_ref or rec.site)
    except HpctrainError as exc:
        raise HpctrainError(f"{run.path / 'job.yaml'} no longer loads: {exc.what}", exc.where,
                            exc.fix) from None
    job = msgspec.structs.replace(job, workdir=rec.workdir or job.workdir,
                                  source=str(run.path / "job.yaml"))
    code_dir = str(run.path / CODE_DIR) if rec.snapshot else None
    plan = make_plan(job, str(run.path), code_dir)
    return FromRun(run=run, job=job, doc=doc, workdir=plan.workdir, python=list(plan.python))


def one_rank(source: FromRun, name: str, program: list[str], env: dict[str, str],
             time: str | None = None) -> Job:
    """The run's job turned into one rank on one node (one GPU if it trained on GPUs) that runs
    `program` ([script or -m, module, *args], under the bootstrap) in the run's code, with the
    run's environment plus `env`, no requeue, and its run directory beside the run's; `time`:
    its time limit (default the run's)."""
    doc = {k: v for k, v in source.doc.items() if k not in _TRAINING_ONLY}
    container = doc.get("container")
    if isinstance(container, dict) and container.get("isaac_sim_caches") is None \
            and runs_isaaclab(adapter(source.job.spec.library), source.job.spec):
        # The run's Isaac Sim caches stay bound: the derived job's program is not Isaac Lab's
        # train, but what it starts is Isaac Lab (containers.plan decides by the library).
        doc["container"] = {**container, "isaac_sim_caches": True}
    if isinstance(doc.get("container"), dict):
        # The derived job reads the run's checkpoints and writes its records into the run
        # (eval/, exports/): a container binds only its own run directory and working directory
        # (the run's code/ when it was snapshotted), so the run is bound too.
        where = str(source.run.path)
        doc["container"] = {**doc["container"], "mounts": [
            *(doc["container"].get("mounts") or []), f"{where}:{where}"]}
    res = dict(doc.get("resources") or {})
    res.update(nodes=1, procs_per_node=1, spare_nodes=0,
               gpus_per_node=min(1, int(res.get("gpus_per_node") or 0)))
    if time is not None:
        res["time"] = time
    doc.update(name=name, library="command", script=program[0], args=list(program[1:]),
               resources=res, snapshot=False, runs_dir=source.runs_dir,
               python=shlex.join(source.python),
               env={**(doc.get("env") or {}), **env},
               preemption={**(doc.get("preemption") or {}), "enabled": False})
    try:
        job = load_job(doc, site=source.job.site_ref)
    except HpctrainError as exc:
        if time is not None and "'resources.time'" in exc.what:
            raise HpctrainError(f"{time!r} is not a time limit", "--time", exc.fix) from None
        raise
    return msgspec.structs.replace(job, workdir=source.workdir, source=source.job.source)


def as_array(jobs: list[tuple[dict, Job]]) -> Job:
    """Several derived jobs as one job array (a sweep's shape: job/sweep.py), each task's values
    shown by `status`."""
    if len(jobs) == 1:
        return jobs[0][1]
    first = jobs[0][1]
    return msgspec.structs.replace(first, tasks=tuple(Task(i, values, job)
                                                      for i, (values, job) in enumerate(jobs)))


def new_place(source: FromRun, name: str) -> tuple[str, Path]:
    """A run id and directory for a derived job, made before it is planned (its tasks are told
    where to write)."""
    run_id = new_run_id()
    return run_id, run_path(source.runs_dir, name, run_id)

"""hpctrain from Python and Jupyter: the same jobs, sites and bootstrap as the CLI, via submitit.

    import hpctrain

    job = hpctrain.load_job(name="allreduce", site="localcluster",
                            resources={"nodes": 2, "procs_per_node": 2})

    def allreduce():                       # runs on every rank, torch.distributed env set up
        import torch, torch.distributed as dist
        dist.init_process_group("gloo")
        t = torch.tensor([float(dist.get_rank())]); dist.all_reduce(t)
        return {"sum": t.item(), "world": dist.get_world_size()}

    h = hpctrain.submit_function(allreduce, job)
    h.wait(timeout=300); h.result()        # rank 0's return value
    h.status(); h.logs(rank=1); h.cancel(); h.run_dir

    h = hpctrain.submit("examples/ddp_check.yaml", site="localcluster")   # the job's command
    h = hpctrain.handle("20250101-120000-ab12")                          # any run, later

Every run gets a run directory (runs/<name>/<run id>/ with run.json, job.yaml, the bootstrap and
submitit's folder) and a line in the same index as CLI runs. Mistakes raise HpctrainError with
the CLI's messages; a failing rank raises JobFailed naming the rank and node.
"""
from __future__ import annotations

import msgspec
import datetime as _dt
import hashlib
import inspect
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from .errors import HpctrainError
from .loading import Job, with_overrides
from .runs import Run, add_to_index, creating, find, git_state, write_atomic

# A job built for a function has no script: this stands in so the job model stays one model.
FUNCTION_SCRIPT = "<python function>"


class JobFailed(HpctrainError):
    """The job ran and failed: a rank raised, or Slurm ended it without a result.

    rank/node: the first rank that failed (None when the job ended outside the ranks);
    remote_traceback: that rank's traceback text.
    """

    def __init__(self, what: str, where: str | None = None, fix: str | None = None, *,
                 rank: int | None = None, node: str | None = None, remote_traceback: str = ""):
        self.rank, self.node, self.remote_traceback = rank, node, remote_traceback
        super().__init__(what, where, fix)

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}\n\nremote traceback:\n{self.remote_traceback}" if self.remote_traceback else text


# ---------------------------------------------------------------------------- loading

def load_job(source: str | os.PathLike | dict | None = None, *, site: str | None = None,
             overrides: Iterable[str] = (), **values: Any) -> Job:
    """Load and validate a job, as `hpctrain validate` does.

    source: a job.yaml path, a dict with the job file's keys, or None (keywords only).
    site: a site name ("localcluster", "local") or a profile path.
    overrides: "key.path=value" strings, like --set.
    values: job keys, e.g. name="x", resources={"nodes": 2}, seed=1.
    A job without `script` is allowed here: it is meant for submit_function().
    """
    from .loading import load_job as _load
    from .yamlfile import load_file
    overrides = list(overrides)
    doc = source if isinstance(source, dict) else (load_file(source) if source is not None else {})
    has_script = "script" in doc or "script" in values or any(
        o.split("=", 1)[0].strip() == "script" for o in overrides)
    library = values.get("library", doc.get("library", "command"))
    if not has_script and library == "command":
        values = dict(values, script=FUNCTION_SCRIPT)
    job = _load(source, site=site, overrides=overrides, **values)
    if job.spec.script == FUNCTION_SCRIPT:
        job = msgspec.structs.replace(job, warnings=tuple(w for w in job.warnings if FUNCTION_SCRIPT not in w))
    return job


def override(job: Job, *overrides: str) -> Job:
    """A new job with `key.path=value` overrides: override(job, "resources.nodes=1", "seed=3")."""
    return with_overrides(job, overrides)


def _as_job(job, load_args: dict) -> Job:
    if isinstance(job, Job):
        if load_args:
            raise HpctrainError(f"load arguments {sorted(load_args)} were given with an already "
                                "loaded job", fix="pass them to load_job(), or use override(job, ...)")
        return job
    return load_job(job, **load_args)


def render(job: Job | str | dict, **load_args) -> str:
    """The sbatch script the CLI would submit for this job (placeholder run id)."""
    from .api import render as _render
    return _render(_as_job(job, load_args))


def validate(job: Job | str | dict, **load_args):
    """Check a job fully (schema, site limits, the launch plan); return its LaunchPlan.
    Warnings are on plan.warnings; errors raise HpctrainError."""
    from .api import prepare
    return prepare(_as_job(job, load_args), run_id="RUN_ID").plan


# ---------------------------------------------------------------------------- submitting

def describe_callable(fn: Callable) -> dict:
    """What ran: module, qualified name, source file and a hash of its source (where Python
    can find it: module files and notebook cells both work)."""
    target = fn
    while hasattr(target, "func") and not inspect.isfunction(target):  # functools.partial
        target = target.func
    info: dict[str, Any] = {
        "module": getattr(target, "__module__", None) or type(target).__module__,
        "qualname": getattr(target, "__qualname__", None) or type(target).__qualname__,
        "source_file": None, "source_sha256": None,
    }
    try:
        info["source_file"] = inspect.getsourcefile(target)
    except (TypeError, OSError):
        pass
    try:
        source = inspect.getsource(target)
        info["source_sha256"] = hashlib.sha256(source.encode()).hexdigest()
        info["source"] = source
    except (TypeError, OSError):
        pass
    return info


def _check_secrets(job: Job) -> None:
    missing = [n for n in job.spec.secrets if not os.environ.get(n)]
    if missing:
        raise HpctrainError(f"secret(s) {', '.join(missing)} not set in this process's environment",
                            job.source, "set them (os.environ[...] or export before starting "
                            "Jupyter); their values are never written to disk")


def _submit(job: Job, kind: str, make_fn: Callable[[Any], Any], extra_record: dict) -> "Handle":
    from .api import prepare, write_run_files
    from .backends.submitit import SUBMITIT_DIR, make_executor
    prep = prepare(job)
    _check_secrets(job)
    fn = make_fn(prep)
    _check_picklable(fn, extra_record.get("function"))
    with creating(prep.run_dir) as run:
        script = write_run_files(prep, run)
        if kind == "function":
            script.unlink()  # the CLI script would run the placeholder; submitit writes the real one
        folder = run.path / SUBMITIT_DIR
        ex = make_executor(job, prep.plan, folder, kind=kind)
        run.update(backend="submitit", scheduler=prep.plan.scheduler, kind=kind,
                   script=None if kind == "function" else prep.script_name,
                   submitit_folder=str(folder), **extra_record)
        try:
            sjob = ex.submit(fn)
        except HpctrainError:
            raise
        except Exception as exc:  # sbatch's refusal arrives as submitit's FailedJobError
            msg = str(exc).strip()
            raise HpctrainError(f"sbatch refused the job: {msg}" if prep.plan.scheduler == "slurm"
                                else f"could not start the job: {msg}", job.source,
                                "check partition/account/qos/time against `sinfo` and the site "
                                "profile; hpctrain.render(job) shows the CLI's script") from None
        try:
            fields: dict[str, Any] = dict(
                job_id=str(sjob.job_id), state="SUBMITTED",
                # submitit counts nodes x tasks even without srun; the command runs once.
                tasks=len(sjob._tasks) if kind == "function" else 1,
                submitted=_dt.datetime.now().astimezone().isoformat(timespec="seconds"))
            if prep.plan.scheduler == "local":
                from .backends.local import _start_time
                fields.update(pid=int(sjob.job_id), pid_start=_start_time(int(sjob.job_id)))
            run.update(**fields)
            add_to_index(run)
        except BaseException:
            sjob.cancel(check=False)  # a running job with no record would be an orphan
            raise
    return Handle(run, sjob)


def _check_picklable(fn, info: dict | None) -> None:
    import cloudpickle
    try:
        cloudpickle.dumps(fn)
    except Exception as exc:
        name = f"{info['module']}.{info['qualname']}" if info else "the job"
        raise HpctrainError(
            f"{name} (or its arguments) cannot be pickled to send it to the nodes: "
            f"{type(exc).__name__}: {exc}", (info or {}).get("source_file"),
            "pass plain data (numbers, strings, dicts, arrays) as arguments; create locks, open "
            "files, sockets and process groups inside the function") from None


def submit_function(fn: Callable, job: Job | str | dict, *args: Any, **kwargs: Any) -> "Handle":
    """Run fn(*args, **kwargs) on every rank of the job; return a Handle.

    One submitit task per rank. Before fn is called each rank has RANK, LOCAL_RANK, WORLD_SIZE,
    LOCAL_WORLD_SIZE, MASTER_ADDR (the first node of the job's node list), MASTER_PORT (from the
    job id by the site's rule) and the bootstrap's set-up: the site's and job's env, threads,
    HPCTRAIN_SEED (+ random/numpy/torch seeded), CPU shims (cpu mode) or cuda:LOCAL_RANK pinned.
    fn creates the process group itself: dist.init_process_group("gloo" or "nccl").
    handle.result() is rank 0's return value. fn and its arguments are pickled (cloudpickle):
    functions from notebook cells work.
    """
    if not callable(fn):
        raise HpctrainError(f"submit_function needs a callable, got {type(fn).__name__}",
                            fix="submit_function(my_function, job, *args)")
    job = _as_job(job, {})
    from .backends.submitit import RankFunction
    info = describe_callable(fn)
    source = info.pop("source", None)

    def make(prep):
        p = prep.plan
        return RankFunction(fn, args, kwargs, run_dir=str(prep.run_dir), config=p.bootstrap,
                            env=p.env, procs_per_node=p.nproc_per_node, port_base=p.port_base,
                            port_slots=p.port_slots, port_fixed=p.port_fixed)

    record = {"function": info}
    if info["source_file"] and os.path.isfile(info["source_file"]):
        src_git = git_state(os.path.dirname(os.path.abspath(info["source_file"])))
        if src_git.get("commit"):
            record["function"]["git"] = src_git
    handle = _submit(job, "function", make, record)
    if source is not None:  # the code as read at submit time, beside the pickle that ran
        write_atomic(handle.run_dir / "function.py", source)
    return handle


def submit(job: Job | str | dict, **load_args) -> "Handle":
    """Submit the job's own command (its script under torchrun, as `hpctrain submit` does)
    through submitit; return a Handle. handle.result() is {"exit_code": 0, ...} or raises
    JobFailed naming the failed ranks."""
    job = _as_job(job, load_args)
    if job.spec.script == FUNCTION_SCRIPT:
        raise HpctrainError(f"job '{job.spec.name}' has no script to run", job.source,
                            "give it one (script=\"train.py\"), or run a function: "
                            "hpctrain.submit_function(fn, job)")
    from .backends.submitit import CommandFunction

    def make(prep):
        return CommandFunction(str(prep.run_dir / prep.script_name), str(prep.run_dir))
    return _submit(job, "command", make, {})


def handle(ref: str | os.PathLike | None = None) -> "Handle":
    """A handle on a run submitted earlier (from Python or the CLI): by run id, run directory or
    Slurm job id; None is the newest run."""
    from .runs import latest
    if ref is None:
        run = latest()
        if run is None:
            raise HpctrainError("no runs yet", fix="submit one first")
        return Handle(run)
    return Handle(find(str(ref)))


# ---------------------------------------------------------------------------- the handle

class Handle:
    """A submitted run: status, logs, cancel, wait, result, and its run directory."""

    def __init__(self, run: Run, submitit_job=None):
        self.run = run
        self._job = submitit_job

    # --- identity
    @property
    def run_dir(self) -> Path:
        return self.run.path

    @property
    def run_id(self) -> str:
        return self.run.id

    @property
    def record(self) -> dict:
        return self.run.record

    @property
    def job_id(self) -> str:
        return str(self.record["job_id"])

    def __repr__(self) -> str:
        rec = self.record
        return (f"<hpctrain run {self.run_id} job {rec.get('job_id')} on {rec.get('site')} "
                f"({rec.get('kind', 'command')}) at {self.run_dir}>")

    # --- state
    def _tasks(self) -> int:
        return int(self.record.get("tasks") or 1)

    def _scheduler(self) -> str:
        rec = self.record
        return rec.get("scheduler") or ("local" if rec.get("backend") == "local" else "slurm")

    def _outcomes(self) -> dict[int, tuple[str, Any]]:
        """Each task's (outcome, value) as submitit pickled it; absent tasks left none."""
        from submitit.core.utils import JobPaths, pickle_load
        folder = Path(self.record.get("submitit_folder") or self.run_dir / "submitit")
        out = {}
        for task in range(self._tasks()):
            p = JobPaths(folder, job_id=self.job_id, task_id=task).result_pickle
            if p.exists():
                out[task] = pickle_load(p)
        return out

    def status(self):
        """A JobState (Slurm's words: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, ...)."""
        from .backends.base import JobState
        rec = self.record
        if rec.get("backend") != "submitit":  # a CLI run: the same answer `hpctrain status` gives
            from .status import gather
            return gather(self.run).state
        if self._scheduler() == "slurm":
            from .backends.slurm import SlurmBackend
            state = SlurmBackend().state(self.run)
            if state.state != "UNKNOWN":
                return state
        elif self._local_alive():
            return JobState("RUNNING", nodes=os.uname().nodename)
        outcomes = self._outcomes()  # the scheduler forgot the job, or it ran on this machine
        if any(o == "error" for o, _ in outcomes.values()):
            return JobState("FAILED", exit_code=1)
        if outcomes and len(outcomes) == self._tasks():
            return JobState("COMPLETED", exit_code=0)
        return JobState("CANCELLED" if rec.get("cancelled") else "UNKNOWN",
                        reason="no result from every task")

    def _local_alive(self) -> bool:
        if self._job is not None:
            return not self._job.done()
        from .backends.local import recorded_process_alive
        return recorded_process_alive(self.record)

    def done(self) -> bool:
        return self.status().done

    def wait(self, timeout: float | None = None, poll: float = 1.0):
        """Block until the job ends; return its final JobState. TimeoutError after `timeout` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            state = self.status()
            if state.done or state.state == "UNKNOWN" and self._outcomes():
                return state
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {self.run_id} (job {self.job_id}) still {state.state} "
                                   f"after {timeout:.0f}s")
            time.sleep(poll)

    # --- results
    def results(self, timeout: float | None = None) -> list:
        """Every rank's return value, by rank (function runs); raises JobFailed as result()."""
        state = self.wait(timeout)
        outcomes = self._outcomes()
        errors = {t: v for t, (o, v) in outcomes.items() if o == "error"}
        if errors:
            raise self._failure(errors)
        missing = [t for t in range(self._tasks()) if t not in outcomes]
        if missing:
            raise JobFailed(f"the job ended {state.state} without a result from "
                            f"{'rank' if len(missing) == 1 else 'ranks'} "
                            f"{', '.join(map(str, missing))}" + (f" ({state.reason})" if state.reason else ""),
                            str(self.run_dir), "see handle.logs(); a time limit or scancel ends "
                            "a job without results")
        return [outcomes[t][1] for t in range(self._tasks())]

    def result(self, timeout: float | None = None):
        """Rank 0's return value (the command's outcome for command runs). Waits for the end."""
        return self.results(timeout)[0]

    def _failure(self, errors: dict[int, str]) -> JobFailed:
        notes = {}
        for p in sorted((self.run_dir / "status").glob("rank-*.failed")):
            try:
                notes[int(p.stem.split("-")[1].split(".")[0])] = p.read_text().strip()
            except (ValueError, OSError):
                pass
        if self.record.get("kind") == "command":
            text = errors[min(errors)]
            rank = min(notes) if notes else None
            what = notes[rank] if rank is not None else "the job script failed"
            return JobFailed(what, str(self.run_dir), f"the rank's log: {self.run_dir}/logs/rank-{rank}.log"
                             if rank is not None else "see handle.logs()", rank=rank,
                             remote_traceback=text)
        failed = [t for t in errors if t in notes] or sorted(errors)
        rank = min(failed)
        note = notes.get(rank, "")
        node = None
        if " on " in note:
            node = note.split(" on ", 1)[1].split(" exited")[0]
        what = note.replace(" exited 1: ", " raised ", 1) if note else f"rank {rank} failed"
        return JobFailed(what, str(self.run_dir),
                         f"its log: {self.run_dir}/logs/rank-{rank}.log", rank=rank, node=node,
                         remote_traceback=errors[rank])

    # --- logs and cancel
    def logs(self, rank: int | None = None) -> str:
        """One rank's log (logs/rank-R.log), or with rank=None the job's console output."""
        if rank is not None:
            p = self.run_dir / "logs" / f"rank-{rank}.log"
            return p.read_text(errors="replace") if p.exists() else ""
        parts = []
        folder = self.run_dir / "submitit"
        for p in sorted(folder.glob(f"{self.job_id}_*_log.out")) + sorted(
                (self.run_dir / "logs").glob("slurm-*.out")):
            parts.append(p.read_text(errors="replace"))
        return "".join(parts)

    def cancel(self) -> None:
        """Cancel the job (scancel on Slurm; SIGTERM to the local controller)."""
        if self.record.get("backend") != "submitit":
            from .operate import cancel
            cancel(self.run)
            return
        self.run.update(cancelled=True)
        if self._scheduler() == "slurm":
            from .backends.slurm import SlurmBackend
            SlurmBackend().abort(self.job_id)
        elif self._job is not None:
            self._job.cancel(check=False)
        elif self._local_alive():
            import signal
            os.kill(int(self.record["pid"]), signal.SIGTERM)


__all__ = ["Handle", "JobFailed", "describe_callable", "handle", "load_job", "override", "render",
           "submit", "submit_function", "validate", "FUNCTION_SCRIPT"]

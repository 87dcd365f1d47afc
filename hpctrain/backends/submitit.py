"""submitit as a backend: a Python function run on every rank of a job, from Python or Jupyter.

One submitit task per rank (`--ntasks-per-node` = ranks per node). On Slurm the batch shell first
runs the very same parts of the job script the CLI renders (templates/parts/: `cd`, modules,
setup lines, the site's and job's env, the secrets check; templates/slurm/nodes.sh.j2 and the
rendezvous part: the head = first node of the job's own node list, the port from the job id by
the site's rule, the loopback check) and exports HPCTRAIN_HEAD/PORT; srun hands that environment
to every task. Each task then turns Slurm's task ids into torch's variables and runs the
bootstrap's own steps (rank log, identity, threads, seed, CPU shims or device pinning) before
calling the function. No second implementation of the rendezvous rules. On the `local` site,
submitit's LocalExecutor runs the tasks on this machine.

submitit's parameters are derived from the plan's directive table, by key. This module imports
submitit only inside functions: `import hpctrain` and the CLI stay cheap.
"""
from __future__ import annotations

import hashlib
import inspect
import math
import os
import sys
from pathlib import Path
from typing import Any, Callable

from ..errors import HpctrainError
from ..runs.records import Run
from ..schema.spec import slurm_seconds
from .base import Backend, JobState, State, preemption_directives

SUBMITIT_DIR = "submitit"  # inside the run directory

# Directive keys with a submitit parameter of their own; every other key goes through
# additional_parameters, except those submitit writes itself (its output, its signal handling).
_PARAMETERS = {"job-name": "job_name", "nodes": "nodes", "ntasks-per-node": "ntasks_per_node",
               "cpus-per-task": "cpus_per_task", "gpus-per-node": "gpus_per_node", "gres": "gres",
               "partition": "partition", "account": "account", "qos": "qos",
               "constraint": "constraint", "exclusive": "exclusive"}
_SUBMITIT_OWN = {"output", "open-mode"}
_COUNTS = {"nodes", "ntasks_per_node", "cpus_per_task"}


# ---------------------------------------------------------------------------- parameters

def slurm_parameters(plan, *, setup: list[str] | None = None) -> dict[str, Any]:
    """SlurmExecutor.update_parameters() arguments for a function run: the plan's directive
    table, with one task per rank instead of one torchrun per node."""
    params: dict[str, Any] = {"stderr_to_stdout": True}
    if plan.preemption:
        params["signal_delay_s"] = plan.preemption["lead_time"]
    # The batch script's own preemption entries are its signal trap's, which a function run has
    # not: submitit installs its own handler. The site's extras pass on.
    theirs = list(preemption_directives(plan.preemption))
    additional: dict[str, Any] = {}
    for key, value in plan.directives:
        if (key, value) in theirs:
            theirs.remove((key, value))
        elif key == "time":
            params["time"] = max(1, math.ceil(slurm_seconds(value) / 60))  # Slurm rounds up too
        elif key in _SUBMITIT_OWN:
            continue
        elif key in _PARAMETERS:
            name = _PARAMETERS[key]
            params[name] = True if value is None else int(value) if name in _COUNTS else value
        else:
            # mem: Slurm's string, not GB. submitit quotes values itself (shlex.quote).
            additional[key] = True if value is None else value
    params["ntasks_per_node"] = plan.nproc_per_node
    params["cpus_per_task"] = plan.cpus_per_task // plan.nproc_per_node
    if additional:
        params["additional_parameters"] = additional
    # One failing rank ends the step: the others would otherwise wait in a collective until its
    # timeout; the failing rank's own exception is what the handle reports.
    params["srun_args"] = ["--kill-on-bad-exit=1"]
    params["use_srun"] = True
    if setup:
        params["setup"] = setup
    return params


def local_parameters(job, plan) -> dict[str, Any]:
    """LocalExecutor.update_parameters() arguments: this machine, one process per rank."""
    r = job.spec.resources
    params: dict[str, Any] = {
        "nodes": 1,
        "tasks_per_node": plan.nproc_per_node,
        "timeout_min": max(1, math.ceil(slurm_seconds(r.time) / 60)),
        "stderr_to_stdout": True,
    }
    if r.gpus_per_node:
        params["gpus_per_node"] = r.gpus_per_node
    lines = [f"module load {m}" for m in plan.modules] + list(plan.setup)
    if lines:
        params["setup"] = lines
    return params


def batch_prelude(plan) -> list[str]:
    """The job script's own environment and rendezvous parts, for submitit's `setup`."""
    import shlex
    from ..rendering.templates import render_part
    parts = ("parts/functions.sh.j2", "parts/environment.sh.j2", "slurm/nodes.sh.j2",
             "parts/rendezvous.sh.j2")
    text = f"RUN_DIR={shlex.quote(plan.run_dir)}\n" + "".join(
        render_part(plan, part) for part in parts)
    return text.splitlines()


def make_executor(job, plan, folder: Path, far_folder: Path | None = None):
    """A submitit executor configured from the job and its site; with far_folder, for a cluster
    behind a login node (commands.where()): it writes its files in `folder` here, and the job
    reads them in far_folder there."""
    try:
        import submitit
    except ImportError:
        raise HpctrainError("submitting Python functions needs submitit, which is not installed",
                            fix="pip install 'hpctrain[submitit]'") from None
    import shlex
    python = " ".join(shlex.quote(p) for p in plan.python)
    if plan.backend == "local":
        ex = submitit.LocalExecutor(folder=folder, python=python)
        ex.update_parameters(**local_parameters(job, plan))
        return ex
    try:
        if far_folder is not None:
            ex = _far_executor(submitit)(folder=folder, python=python)
            ex.far_folder = far_folder
        else:
            ex = submitit.SlurmExecutor(folder=folder, python=python)
    except RuntimeError as exc:  # submitit's check that srun exists
        raise HpctrainError(f"site '{job.site.name}' submits to Slurm, but {exc}",
                            fix="run on a Slurm login node, or use site='local'") from None
    try:
        ex.update_parameters(**slurm_parameters(plan, setup=batch_prelude(plan)))
    except ValueError as exc:
        raise HpctrainError(f"submitit refused the parameters for site '{job.site.name}': {exc}",
                            where=job.source) from None
    return ex


def _far_executor(submitit):
    """submitit's SlurmExecutor for a cluster reached through its login node: the submission
    file and the pickle are written here, in the run's mirror, and copied to the run directory
    there; the file names the cluster's folder; sbatch runs on the login node
    (commands.run inside commands.on(login)); srun is not needed here."""
    import uuid

    from submitit.core import utils

    from . import commands

    class FarSlurmExecutor(submitit.SlurmExecutor):
        far_folder: Path

        @classmethod
        def affinity(cls) -> int:
            return 1  # srun is on the cluster, not here

        def _make_submission_file_text(self, command: str, uid: str) -> str:
            text = super()._make_submission_file_text(command, uid)
            return text.replace(str(Path(self.folder).absolute()), str(self.far_folder))

        def _submit_command(self, command: str):
            # submitit's own steps (core.PicklingExecutor._submit_command), with the files
            # copied to the cluster before sbatch runs there.
            tmp_uuid = uuid.uuid4().hex
            here = utils.JobPaths.get_first_id_independent_folder(self.folder)
            path = here / f".submission_file_{tmp_uuid}.sh"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self._make_submission_file_text(command, tmp_uuid))
            login = commands.where()
            login.push(str(here.parent), str(self.far_folder.parent), excludes=["/.submitting"])
            output = commands.run(["sbatch", str(self.far_folder / path.name)])
            job_id = self._get_job_id_from_submission_command(output)
            job = self.job_class(folder=self.folder, job_id=job_id,
                                 tasks=list(range(self._num_tasks())))
            job.paths.move_temporary_file(path, "submission_file", keep_as_symlink=True)
            return job

    return FarSlurmExecutor


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
    source = source_of(target)
    if source is not None:
        info["source_sha256"] = hashlib.sha256(source.encode()).hexdigest()
    return info


def source_of(fn: Callable) -> str | None:
    while hasattr(fn, "func") and not inspect.isfunction(fn):  # functools.partial
        fn = fn.func
    try:
        return inspect.getsource(fn)
    except (TypeError, OSError):
        return None


def function_run(fn: Callable, args: tuple, kwargs: dict, prep) -> dict:
    """What turns a prepared job into a function run: the callable every rank runs and the
    run.json fields that describe it (submission.submit_function applies them)."""
    from ..runs.records import git_state
    info = describe_callable(fn)
    check_picklable(fn, args, kwargs, info)
    if info["source_file"] and os.path.isfile(info["source_file"]):
        src_git = git_state(os.path.dirname(os.path.abspath(info["source_file"])))
        if src_git.get("commit"):
            info["git"] = src_git
    plan = prep.plan
    rank_fn = RankFunction(fn, args, kwargs, run_dir=str(prep.run_dir), config=plan.bootstrap,
                           env=plan.env, procs_per_node=plan.nproc_per_node,
                           port_base=plan.port_base, port_slots=plan.port_slots,
                           port_fixed=plan.port_fixed)
    # submitit's folder as read here: the run's mirror, for a run on a cluster behind a login node
    record = {"scheduler": plan.backend, "kind": "function",
              "submitit_folder": str((prep.mirror or prep.run_dir) / SUBMITIT_DIR), "function": info}
    return {"backend": "submitit", "function": rank_fn, "record": record}


def check_picklable(fn, args, kwargs, info: dict) -> None:
    import cloudpickle
    try:
        cloudpickle.dumps((fn, args, kwargs))
    except Exception as exc:
        raise HpctrainError(
            f"{info['module']}.{info['qualname']} (or its arguments) cannot be pickled to send "
            f"it to the nodes: {type(exc).__name__}: {exc}", info.get("source_file"),
            "pass plain data (numbers, strings, dicts, arrays) as arguments; create locks, open "
            "files, sockets and process groups inside the function") from None


# ---------------------------------------------------------------------------- the backend

class SubmititBackend(Backend):
    """Function runs: submitted through submitit's executor for the site's scheduler; their
    state is that scheduler's, completed by the result pickles submitit leaves."""
    name = "submitit"
    no_spares = "submitit starts the ranks itself, with no batch shell to swap a node"
    script_name = "submitit.sbatch"  # submitit writes it, in the run's submitit/ folder

    def submit_command(self, script: Path, plan=None) -> list[str]:
        return ["python", "-c", "hpctrain.submit_function(...)"]

    def submit(self, run: Run, prep) -> str:
        source = source_of(prep.function.fn)
        if source is not None:  # the code as read at submit time, beside the pickle that runs
            (run.path / "function.py").write_text(source)
        far = prep.run_dir if prep.mirror is not None else None
        ex = make_executor(prep.job, prep.plan, run.path / SUBMITIT_DIR,
                           far / SUBMITIT_DIR if far is not None else None)
        try:
            sjob = ex.submit(prep.function)
            if far is not None:  # the pickle, named after the job id once sbatch answered
                from . import commands
                commands.where().push(str(run.path), str(far), excludes=["/.submitting"])
        except HpctrainError:
            raise
        except Exception as exc:  # sbatch's refusal arrives as submitit's FailedJobError
            msg = str(exc).strip()
            raise HpctrainError(f"sbatch refused the job: {msg}" if prep.plan.backend == "slurm"
                                else f"could not start the job: {msg}", prep.job.source,
                                "check partition/account/qos/time against `sinfo` and the site "
                                "profile; hpctrain.render(job) shows the CLI's script") from None
        fields: dict[str, Any] = {"ntasks": len(sjob._tasks)}
        if prep.plan.backend == "local":
            from .local import process_start_time
            fields.update(pid=int(sjob.job_id), pid_start=process_start_time(int(sjob.job_id)))
        run.update(**fields)
        return str(sjob.job_id)

    def states(self, runs: list[Run]) -> list[JobState]:
        slurm = [r for r in runs if r.record.scheduler == "slurm"]
        from .slurm.backend import SlurmBackend
        asked = dict(zip((r.path for r in slurm), SlurmBackend().states(slurm))) if slurm else {}
        out = []
        for run in runs:
            state = asked.get(run.path)
            if state is not None and state.state != State.UNKNOWN:
                out.append(state)
                continue
            if state is None:  # this machine
                from .local import recorded_process_alive
                if recorded_process_alive(run.record):
                    out.append(JobState(State.RUNNING, nodes=os.uname().nodename,
                                        job=str(run.record.job_id)))
                    continue
            out.append(self._from_outcomes(run))
        return out

    def _from_outcomes(self, run: Run) -> JobState:
        """The scheduler forgot the job, or it ran on this machine: its result pickles say."""
        rec = run.record
        # Read, never unpickled: the outcome word is the pickle's first string (a run directory
        # is untrusted data, and deciding a state must not run what a file says).
        outcomes = {t: o for t in range(rec.ntasks) if (o := outcome_word(result_path(run, t)))}
        if any(o == "error" for o in outcomes.values()):
            return JobState(State.FAILED, exit_code=1, job=str(rec.job_id))
        if outcomes and len(outcomes) == rec.ntasks:
            return JobState(State.COMPLETED, exit_code=0, job=str(rec.job_id))
        return JobState(State.CANCELLED if rec.cancelled else State.LOST, job=str(rec.job_id),
                        reason="no result from every task")

    def cancel(self, run: Run) -> None:
        rec = run.record
        if rec.scheduler == "slurm":
            from .slurm.backend import SlurmBackend
            SlurmBackend().abort(str(rec.job_id))
        else:
            from .local import recorded_process_alive
            if recorded_process_alive(rec):
                import signal
                os.kill(int(rec.pid), signal.SIGTERM)

    def abort(self, job_id: str) -> None:
        if job_id.isdigit() and os.path.exists(f"/proc/{job_id}"):  # LocalExecutor: a pid
            import signal
            try:
                os.kill(int(job_id), signal.SIGTERM)
                return
            except ProcessLookupError:
                pass
        from .slurm.backend import SlurmBackend
        SlurmBackend().abort(job_id)

    def output_files(self, run: Run, task: int | None = None) -> list[Path]:
        # The run's own submitit/ folder (here: the mirror, which fetch fills), never a folder
        # run.json names: a record must not point hpctrain at another place to read.
        return sorted((run.path / SUBMITIT_DIR).glob(f"{run.record.job_id}_*_log.out"))


def result_path(run: Run, task: int) -> Path:
    """Where submitit leaves a task's result (its JobPaths.result_pickle), in the run's folder."""
    return run.path / SUBMITIT_DIR / f"{run.record.job_id}_{task}_result.pkl"


_STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING",
               "BINSTRING", "STRING"}


def outcome_word(path: Path) -> str | None:
    """'success' or 'error': the first value of submitit's (outcome, value) pickle, read from
    its opcodes without unpickling anything; None when there is no such file or it is not one."""
    import io
    import pickletools

    from ..runs.untrusted import open_regular
    try:
        with open_regular(path) as f:
            head = f.read(256)
    except OSError:
        return None
    try:
        for op, arg, _ in pickletools.genops(io.BytesIO(head)):
            if op.name in ("PROTO", "FRAME", "MARK"):
                continue
            word = arg.decode("latin-1") if isinstance(arg, bytes) else arg
            return word if op.name in _STRING_OPS and word in ("success", "error") else None
    except Exception:  # noqa: BLE001 - a truncated or foreign stream: no outcome
        return None
    return None


def outcomes_of(run: Run) -> dict[int, tuple[str, Any]]:
    """Each task's (outcome, value) as submitit pickled it; tasks that left none are absent.
    Only for handle.result(s): the user asks for the values of a run of their own (a value is
    unpickled only there, never to decide a state)."""
    from submitit.core.utils import pickle_load
    rec = run.record
    out = {}
    for task in range(rec.ntasks):
        p = result_path(run, task)
        if outcome_word(p) is not None:
            out[task] = pickle_load(p)
    return out


# ---------------------------------------------------------------------------- on the nodes

class RankFailed(Exception):
    """Raised on a rank whose function failed; its message names the rank and node."""

    def __init__(self, rank: int, node: str, error: str, traceback_text: str = ""):
        self.rank, self.node, self.error, self.traceback_text = rank, node, error, traceback_text
        # The original traceback travels in the message: submitit keeps only format_exc() text.
        super().__init__(f"rank {rank} on {node} raised {error}\n\n{traceback_text}".rstrip())

    def __reduce__(self):
        return (RankFailed, (self.rank, self.node, self.error, self.traceback_text))


class RankFunction:
    """What every submitit task runs: torch.distributed's environment, the bootstrap, then fn."""

    def __init__(self, fn: Callable, args: tuple, kwargs: dict, *, run_dir: str, config: dict,
                 env: dict[str, str], procs_per_node: int, port_base: int, port_slots: int,
                 port_fixed: int | None):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.run_dir, self.config, self.env = run_dir, config, env
        self.procs_per_node = procs_per_node
        self.port_base, self.port_slots, self.port_fixed = port_base, port_slots, port_fixed

    def _rendezvous(self, job_env) -> tuple[str, int]:
        head = os.environ.get("HPCTRAIN_HEAD")
        port = os.environ.get("HPCTRAIN_PORT")
        if head and port:  # exported by the batch prelude (Slurm): the job script's own rules
            return head, int(port)
        if job_env.num_nodes > 1:
            raise RuntimeError("hpctrain: HPCTRAIN_HEAD/HPCTRAIN_PORT are not set on a multi-node "
                               "job: the batch prelude did not run")
        # This machine (submitit's local executor): the same port rule on submitit's job id.
        job_id = int("".join(c for c in str(job_env.job_id) if c.isdigit()) or 0)
        port = self.port_fixed or self.port_base + 2 * (job_id % self.port_slots)
        return "127.0.0.1", port

    def __call__(self):
        import submitit

        from ..rank.before import bootstrap as bs
        from ..rank.records import RankConfig
        job_env = submitit.JobEnvironment()
        os.environ.update(self.env)  # already exported on Slurm; the local executor needs it
        head, port = self._rendezvous(job_env)
        rank, local, world = job_env.global_rank, job_env.local_rank, job_env.num_tasks
        os.environ.update({
            "RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(self.procs_per_node),
            "GROUP_RANK": str(job_env.node), "NODE_RANK": str(job_env.node),
            "MASTER_ADDR": head, "MASTER_PORT": str(port),
            "HPCTRAIN_HEAD": head, "HPCTRAIN_PORT": str(port),
            "HPCTRAIN_RUN_DIR": self.run_dir,
        })
        config = RankConfig(**{k: v for k, v in self.config.items() if k != "extra"})
        me = bs.identity(config)
        status_dir = os.path.join(self.run_dir, "status")
        os.makedirs(os.path.join(self.run_dir, "logs"), exist_ok=True)
        bs.tee_output(os.path.join(self.run_dir, "logs", f"rank-{rank}.log"), f"[rank {rank}] ")
        bs.record_identity(status_dir, me)
        bs.set_environment(config, me)
        seed = os.environ.get("HPCTRAIN_SEED")
        if seed is not None:
            _seed_everything(int(seed))
        bs.prepare_device(config, me)
        try:
            return self.fn(*self.args, **self.kwargs)
        except BaseException as exc:
            import traceback
            text = traceback.format_exc()
            sys.stderr.write(text)
            error = f"{type(exc).__name__}: {exc}"
            bs.record_failure(status_dir, me, 1, error)
            raise RankFailed(rank, me.node, error, text) from None
        finally:
            sys.stdout.flush()
            sys.stderr.flush()


def _seed_everything(seed: int) -> None:
    """A function has no argv to read a seed from: seed the usual generators with the rank's
    seed (HPCTRAIN_SEED = job seed + global rank), torch/numpy when they get imported."""
    import random

    from ..rank.during.hooks import after_import
    random.seed(seed)
    after_import("numpy", lambda np: np.random.seed(seed % 2**32))
    after_import("torch", lambda torch: torch.manual_seed(seed))

"""submitit as a backend: the same job, site profile and bootstrap, submitted from Python.

Two things can be submitted:

- a Python function, run once per rank (one submitit task per rank: `--ntasks-per-node` =
  ranks per node). The batch shell first runs the very same environment and rendezvous parts of
  the job script the CLI renders (templates/parts/*.j2: `cd`, modules, setup lines, the site's
  and job's env, the secrets check, the head = first node of the job's own node list, the port
  from the job id by the site's rule, the loopback check) and exports HPCTRAIN_HEAD/PORT; srun
  hands that environment to every task. Each task then turns Slurm's task ids into torch's
  variables and runs the bootstrap's own steps (rank log, threads, seed, CPU shims or device
  pinning) before calling the function. No second implementation of the rendezvous rules.
- the job's command (job.yaml with a script): the rendered job script itself runs in the batch
  shell (submitit with use_srun=False), so srun -> torchrun -> bootstrap happens exactly as after
  `hpctrain submit`. Reimplementing the per-node torchrun launch in Python would give two
  launchers to keep in step; running the script gives one.

This module imports submitit only inside functions: `import hpctrain` and the CLI stay cheap.
"""
from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from ..errors import HpctrainError
from ..spec import slurm_seconds

SUBMITIT_DIR = "submitit"  # inside the run directory


# ---------------------------------------------------------------------------- parameters

def _sbatch_extra(site) -> dict[str, Any]:
    """The site's extra directives ("--reservation=rl", "--requeue") as submitit's
    additional_parameters (value True writes a bare flag)."""
    out: dict[str, Any] = {}
    for extra in site.sbatch_extra:
        if not extra.startswith("--"):
            raise HpctrainError(f"site '{site.name}': sbatch_extra entry '{extra}' must start with '--'",
                                fix="write it as sbatch takes it, e.g. --reservation=rl")
        key, sep, value = extra[2:].partition("=")
        out[key] = value if sep else True
    return out


def slurm_parameters(job, plan, *, kind: str, setup: list[str] | None = None) -> dict[str, Any]:
    """SlurmExecutor.update_parameters() arguments for a job on its site.

    kind "function": one task per rank (ntasks-per-node = ranks per node, cpus-per-task = the
    rank's CPUs). kind "command": one task per node, as the rendered script asks (its srun starts
    one torchrun per node), and no srun around the batch-shell Python.
    Directives the site lists in sbatch_skip are left out, as in the rendered script.
    """
    spec, site, r = job.spec, job.site, job.spec.resources
    skip = set(site.sbatch_skip)
    per_rank = kind == "function"
    params: dict[str, Any] = {
        "job_name": spec.name,
        "nodes": r.nodes,
        "ntasks_per_node": plan.nproc_per_node if per_rank else 1,
        "cpus_per_task": r.cpus_per_proc if per_rank else plan.cpus_per_task,
        # Slurm rounds a time limit up to whole minutes too.
        "time": max(1, math.ceil(slurm_seconds(r.time) / 60)),
        "signal_delay_s": spec.preemption.lead_time,
        "stderr_to_stdout": True,
    }
    for key in ("partition", "account", "qos", "constraint"):
        value = getattr(r, key)
        if value is not None:
            params[key] = value
    if r.exclusive:
        params["exclusive"] = True
    additional: dict[str, Any] = {}
    if r.mem is not None:
        # submitit's own `mem` takes gigabytes as a number; Slurm's string goes through as is.
        additional["mem"] = r.mem
    if r.gpus_per_node:
        count = f"{site.gpu_type}:{r.gpus_per_node}" if site.gpu_type else str(r.gpus_per_node)
        if site.gpu_request == "gres":
            params["gres"] = f"gpu:{count}"
        else:
            params["gpus_per_node"] = count
    additional.update(_sbatch_extra(site))
    for key in list(params):
        if key.replace("_", "-") in skip:
            del params[key]
    additional = {k: v for k, v in additional.items() if k not in skip}
    if additional:
        params["additional_parameters"] = additional
    if per_rank:
        # One failing rank ends the step: the others would otherwise wait in a collective until
        # its timeout; the failing rank's own exception is what the handle reports.
        params["srun_args"] = ["--kill-on-bad-exit=1"]
        params["use_srun"] = True
    else:
        params["use_srun"] = False
    if setup:
        params["setup"] = setup
    return params


def local_parameters(job, plan, *, kind: str) -> dict[str, Any]:
    """LocalExecutor.update_parameters() arguments: this machine, one process per rank."""
    r = job.spec.resources
    params: dict[str, Any] = {
        "nodes": 1,
        "tasks_per_node": plan.nproc_per_node if kind == "function" else 1,
        "timeout_min": max(1, math.ceil(slurm_seconds(r.time) / 60)),
        "signal_delay_s": job.spec.preemption.lead_time,
        "stderr_to_stdout": True,
    }
    if r.gpus_per_node:
        params["gpus_per_node"] = r.gpus_per_node
    lines = [f"module load {m}" for m in plan.modules] + list(plan.setup)
    if lines and kind == "function":
        params["setup"] = lines  # the command's script runs these itself
    return params


def batch_prelude(plan) -> list[str]:
    """The job script's own environment and rendezvous parts, for submitit's `setup`."""
    import shlex
    from ..render import render_plan
    text = "".join([
        f"RUN_DIR={shlex.quote(plan.run_dir)}\n",
        render_plan(plan, "parts/functions.sh.j2"),
        render_plan(plan, "parts/environment.sh.j2"),
        render_plan(plan, "parts/rendezvous.sh.j2"),
    ])
    return text.splitlines()


def python_command(plan) -> str:
    import shlex
    return " ".join(shlex.quote(p) for p in plan.python)


def make_executor(job, plan, folder: Path, *, kind: str):
    """A submitit executor configured from the job and its site."""
    try:
        import submitit
    except ImportError:
        raise HpctrainError("submitting Python functions needs submitit, which is not installed",
                            fix="pip install 'hpctrain[submitit]'") from None
    python = python_command(plan)
    if plan.scheduler == "local":
        ex = submitit.LocalExecutor(folder=folder, python=python)
        ex.update_parameters(**local_parameters(job, plan, kind=kind))
        return ex
    try:
        ex = submitit.SlurmExecutor(folder=folder, python=python)
    except RuntimeError as exc:  # submitit's check that srun exists
        raise HpctrainError(f"site '{job.site.name}' submits to Slurm, but {exc}",
                            fix="run on a Slurm login node, or use site='local'") from None
    setup = batch_prelude(plan) if kind == "function" else None
    try:
        ex.update_parameters(**slurm_parameters(job, plan, kind=kind, setup=setup))
    except ValueError as exc:
        raise HpctrainError(f"submitit refused the parameters for site '{job.site.name}': {exc}",
                            where=job.source) from None
    return ex


# ---------------------------------------------------------------------------- on the nodes

class RankFailed(Exception):
    """Raised on a rank whose function failed; its message names the rank and node."""

    def __init__(self, rank: int, node: str, error: str, traceback_text: str = ""):
        self.rank, self.node, self.error, self.traceback_text = rank, node, error, traceback_text
        # The original traceback travels in the message: submitit keeps only format_exc() text.
        super().__init__(f"rank {rank} on {node} raised {error}\n\n{traceback_text}".rstrip())

    def __reduce__(self):
        return (RankFailed, (self.rank, self.node, self.error, self.traceback_text))


def _load_bootstrap(run_dir: str):
    """The run directory's copy of the bootstrap: the one the record says ran."""
    path = os.path.join(run_dir, "bootstrap.py")
    if os.path.isfile(path):
        spec = importlib.util.spec_from_file_location("_hpctrain_run_bootstrap", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    from .. import bootstrap
    return bootstrap


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
        bs = _load_bootstrap(self.run_dir)
        me = bs.identity(self.config)
        os.makedirs(os.path.join(self.run_dir, "logs"), exist_ok=True)
        bs.tee_output(os.path.join(self.run_dir, "logs", f"rank-{rank}.log"), f"[rank {rank}] ")
        bs.set_environment(self.config, me)
        seed = os.environ.get("HPCTRAIN_SEED")
        if seed is not None:
            _seed_everything(bs, int(seed))
        if bs.cpu_mode_wanted(self.config.get("cpu_mode", "auto")):
            os.environ["HPCTRAIN_CPU_MODE"] = "1"
            patched = bs.install_cpu_shims(self.config.get("library", "command"))
            if patched and rank == 0:
                print("hpctrain: CPU mode: " + "; ".join(patched), file=sys.stderr)
        else:
            bs.pin_device(me)
        try:
            return self.fn(*self.args, **self.kwargs)
        except BaseException as exc:
            import traceback
            text = traceback.format_exc()
            sys.stderr.write(text)
            error = f"{type(exc).__name__}: {exc}"
            bs.record_failure(os.path.join(self.run_dir, "status"), me, 1, error)
            raise RankFailed(rank, me["node"], error, text) from None
        finally:
            sys.stdout.flush()
            sys.stderr.flush()


def _seed_everything(bs, seed: int) -> None:
    """A function has no argv to read a seed from: seed the usual generators with the rank's
    seed (HPCTRAIN_SEED = job seed + global rank), torch/numpy when they get imported."""
    import random
    random.seed(seed)
    bs.after_import("numpy", lambda np: np.random.seed(seed % 2**32))
    bs.after_import("torch", lambda torch: torch.manual_seed(seed))


class CommandFunction:
    """Runs the rendered job script in the batch shell: srun -> torchrun -> bootstrap, as the CLI."""

    def __init__(self, script: str, run_dir: str):
        self.script, self.run_dir = script, run_dir

    def __call__(self) -> dict:
        job_id = os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID") or "local"
        log_path = Path(self.run_dir) / "logs" / f"slurm-{job_id}.out"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            code = subprocess.call(["bash", self.script], stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
        if code != 0:
            failed = sorted(Path(self.run_dir, "status").glob("rank-*.failed"))
            notes = "; ".join(p.read_text().strip() for p in failed)
            raise RuntimeError(f"the job script exited {code}" + (f": {notes}" if notes else "")
                               + f" (log: {log_path})")
        return {"exit_code": 0, "job_id": job_id, "log": str(log_path)}


class SubmititRuns:
    """Answers `hpctrain status/cancel` for runs submitted from Python: the Handle knows how
    (submitit's result pickles, its local controller), so the CLI asks it."""
    name = "submitit"

    def state(self, run):
        from ..python_api import Handle
        return Handle(run).status()

    def cancel(self, run) -> None:
        from ..python_api import Handle
        Handle(run).cancel()

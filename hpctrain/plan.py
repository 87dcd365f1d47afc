"""JobSpec + site -> LaunchPlan: every decision about the launch, made once, as plain values.

The plan holds no shell syntax and the templates hold no decisions: a reader checks *what* is
launched here and *how it is written* in templates/.
"""
from __future__ import annotations

import shlex
import sys
import msgspec

from . import __version__, survive
from .checks import procs_per_node
from .errors import HpctrainError
from .libraries import adapter
from .loading import Job
from .spec import env_text


# A msgspec Struct rather than a dataclass: `dataclasses` (with `inspect`) is ~5 ms of imports
# on render's path, a tenth of what hpctrain adds to the interpreter's start.
class LaunchPlan(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    site: str
    scheduler: str  # slurm | local
    run_dir: str  # absolute; the run id is chosen outside, so rendering stays deterministic
    workdir: str
    directives: list[str]  # "#SBATCH" arguments, e.g. "--nodes=2"
    srun_gpus: str | None  # the GPU request repeated on srun, e.g. "--gpus-per-node=4"
    modules: list[str]
    setup: list[str]  # raw shell lines (site first, then job)
    env: dict[str, str]  # exported in the script, for every rank
    secrets: list[str]  # names that must be set in the submitting environment
    nnodes: int
    nproc_per_node: int
    cpus_per_task: int
    launcher: str  # torchrun | tasks
    python: list[str]  # the interpreter command on the nodes
    program: list[str]  # what the bootstrap runs: [script, *args]
    head_mode: str
    head_interface: str | None
    head_suffix: str | None
    port_fixed: int | None
    port_base: int
    port_slots: int  # rendezvous port = base + 2*(job id % slots); +1 is the job's spare port
    rdzv_conf: str
    max_restarts: int
    monitor_interval: float | None
    preflight: bool
    bootstrap: dict  # written to bootstrap.json; read by every rank
    preemption: dict | None = None  # survive.preemption(): signal, lead_time, grace, requeue…
    preflight_timeout: int = 60
    version: str = __version__
    warnings: tuple[str, ...] = ()

    @property
    def multinode(self) -> bool:
        return self.nnodes > 1


def rendezvous_timeouts(job: Job) -> dict[str, int]:
    """c10d timeouts sized to the job: big jobs and cold container pulls need longer joins."""
    la, nodes = job.spec.launcher, job.spec.resources.nodes
    return {
        "join_timeout": la.join_timeout or (600 if nodes <= 64 else 1200),
        "last_call_timeout": la.last_call_timeout or (30 if nodes <= 64 else 120),
        "close_timeout": la.close_timeout or 60,
    }


def _directives(job: Job, run_dir: str, ppn: int) -> tuple[list[str], str | None]:
    spec, site, r = job.spec, job.site, job.spec.resources
    gpus = None
    if r.gpus_per_node:
        count = f"{site.gpu_type}:{r.gpus_per_node}" if site.gpu_type else str(r.gpus_per_node)
        gpus = (f"--gpus-per-node={count}" if site.gpu_request == "gpus-per-node"
                else f"--gres=gpu:{count}")
    d: list[tuple[str, str | None]] = [
        ("job-name", spec.name),
        ("nodes", str(r.nodes)),
        ("ntasks-per-node", "1"),  # one torchrun per node; it starts the ranks
        ("cpus-per-task", str(ppn * r.cpus_per_proc)),
    ]
    if gpus:
        d.append((gpus[2:].split("=")[0], gpus.split("=", 1)[1]))
    for key in ("mem", "time", "partition", "account", "qos", "constraint"):
        value = getattr(r, key)
        if value is not None:
            d.append((key, str(value)))
    if r.exclusive:
        d.append(("exclusive", None))
    d.append(("output", f"{run_dir}/logs/slurm-%j.out"))
    d.append(("open-mode", "append"))  # a requeued run keeps appending to the same log
    skip = set(site.sbatch_skip)
    out = [f"--{k}" if v is None else f"--{k}={v}" for k, v in d if k not in skip]
    for extra in site.sbatch_extra:
        if not extra.startswith("--"):
            raise HpctrainError(f"site '{site.name}': sbatch_extra entry '{extra}' must start "
                                "with '--'", fix="write it as sbatch takes it, e.g. --reservation=rl")
        out.append(extra)
    for line in out:
        if any(c.isspace() for c in line) or "'" in line or '"' in line:
            raise HpctrainError(f"the directive '#SBATCH {line}' holds spaces or quotes, which "
                                "sbatch does not read reliably", fix="remove them from that value")
    return out, (gpus if "gpus-per-node" not in skip and "gres" not in skip else None)


def make_plan(job: Job, run_dir: str) -> LaunchPlan:
    spec, site = job.spec, job.site
    lib = adapter(spec.library)
    warnings = list(job.warnings)  # the adapter's own checks ran at load time
    ppn = procs_per_node(spec)
    directives, srun_gpus = _directives(job, run_dir, ppn)
    preempt = survive.preemption(job)
    at = len(directives) - len(job.site.sbatch_extra)  # ours before the site's own extras
    directives[at:at] = survive.directives(preempt)
    env = {k: env_text(v) for k, v in site.env.items()}
    env.update({k: env_text(v) for k, v in spec.env.items()})
    env.update(lib.env(spec))
    env.update(survive.restart_env(job))
    env.update({
        "HPCTRAIN_RUN_DIR": run_dir,
        "HPCTRAIN_JOB_NAME": spec.name,
        "HPCTRAIN_SITE": site.name,
        "HPCTRAIN_LIBRARY": spec.library,
    })
    try:
        python = (shlex.split(spec.python) if spec.python is not None
                  else lib.python(spec) or [sys.executable])
    except ValueError as exc:
        raise HpctrainError(f"'python' is not a valid command: {exc}", job.source,
                            'e.g. python: "isaaclab.sh -p"') from None
    if not python:
        raise HpctrainError("'python' is empty", job.source, "e.g. python: python3")
    t = rendezvous_timeouts(job)
    rdzv_conf = ",".join(f"{k}={v}" for k, v in t.items())
    cpu_mode = spec.cpu_mode or site.cpu_mode
    preflight = spec.launcher.preflight if spec.launcher.preflight is not None else spec.resources.nodes > 1
    bootstrap = {
        "library": spec.library,
        "cpu_mode": cpu_mode,
        "seed": spec.seed,
        "cpus_per_proc": spec.resources.cpus_per_proc,
        "threads_from_env": "OMP_NUM_THREADS" in env,
        "collective_timeout": spec.launcher.collective_timeout,
        "launcher": lib.launcher,
        "rank_env": dict(lib.rank_env),
        "unset_env": list(lib.unset_env),
        "chdir_run_dir": lib.run_in_run_dir(spec),
        # The site's NCCL set again, so that a rank started without this script (submitit)
        # gets it too, before any library is imported.
        "env": {k: env_text(v) for k, v in site.env.items()},
        "preempt_signal": preempt["signal"] if preempt else None,
        "resume": {"patterns": lib.checkpoint_patterns(spec), "args": lib.resume_args(spec)},
        # The preflight's rank check (bootstrap.rank_check) needs torch: torchrun jobs only.
        "rank_check_timeout": (survive.preflight_timeout(job)
                               if preflight and lib.launcher == "torchrun" else None),
    }
    return LaunchPlan(
        name=spec.name, site=site.name, scheduler=site.scheduler, run_dir=run_dir,
        workdir=job.workdir, directives=directives, srun_gpus=srun_gpus,
        modules=list(site.modules), setup=list(site.setup) + list(spec.setup),
        env=env, secrets=list(spec.secrets), nnodes=spec.resources.nodes, nproc_per_node=ppn,
        cpus_per_task=ppn * spec.resources.cpus_per_proc, launcher=lib.launcher,
        python=python, program=lib.program(spec),
        head_mode=site.head.mode, head_interface=site.head.interface, head_suffix=site.head.suffix,
        port_fixed=site.port.fixed, port_base=site.port.base, port_slots=max(1, site.port.span // 2),
        rdzv_conf=rdzv_conf, max_restarts=spec.launcher.max_restarts,
        monitor_interval=spec.launcher.monitor_interval, preflight=preflight,
        bootstrap=bootstrap, warnings=tuple(warnings), preemption=preempt,
        preflight_timeout=survive.preflight_timeout(job),
    )

"""Job -> LaunchPlan: every decision about the launch, made once, as plain values.

The plan holds no shell syntax and the templates hold no decisions: a reader checks *what* is
launched here and *how it is written* in templates/. Any Job that loaded can be planned: every
user error was raised while loading (job/checks.py).
"""
from __future__ import annotations

import os
import shlex

import msgspec

from .. import __version__
from . import chains, containers, preemption
from ..backends import backend_class, transport
from ..backends.base import preemption_directives
from .checks import procs_per_node, runs_isaaclab
from ..libraries import adapter
from .load import Job
from .sbatch_options import option_values
from ..schema.spec import env_text

# A msgspec Struct rather than a dataclass: render's path then imports neither `dataclasses` nor
# `inspect`, which it needs for nothing else (bench/run's render rows measure that path).
class LaunchPlan(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    site: str
    backend: str  # the site's scheduler: its backend writes the header, its templates the rest
    run_dir: str  # absolute; the run id is chosen outside, so rendering stays deterministic
    workdir: str  # where the program runs: the code snapshot's copy of the submit directory
    setup_dir: str  # where modules and setup lines run: the directory the job was submitted from
    # The directive table: (option, value or None for a flag), hpctrain's in a fixed order, then
    # the site's sbatch_extra, the job's own `sbatch:` options (replacing a site extra of the
    # same name) and what it waits for (`after`); those in the site's sbatch_skip left out.
    # Slurm's option names; each backend writes (or translates) it in its own syntax.
    directives: list[tuple[str, str | None]]
    gpus: tuple[str, str] | None  # the GPU request, repeated on the launch step
    modules: list[str]
    module_init: str | None  # sourced before the first `module` command (site's module_init)
    setup: list[str]  # raw shell lines (site first, then job)
    env: dict[str, str]  # exported in the script, for every rank
    secrets: list[str]  # names that must be set in the submitting environment
    nnodes: int
    nproc_per_node: int
    cpus_per_task: int
    launcher: str  # torchrun | tasks
    python: list[str]  # the interpreter command on the nodes
    program: list[str]  # what the bootstrap runs: [script, *args] (also in bootstrap.json)
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
    bootstrap: dict  # bootstrap.json (rank/records.RankConfig); read by every rank
    # What only the site's scheduler's templates use, from its backend (Backend.plan_values):
    # e.g. the ssh backend's hosts and ssh options.
    scheduler: dict = {}
    preemption: dict | None = None  # preemption.preemption(): signal, lead_time, grace, requeue…
    preflight_timeout: int = 60
    # containers.plan(): the container each node's launch runs in; None: none.
    container: dict | None = None
    # The interpreter for hpctrain's own stdlib-only helpers on the host (the failure record,
    # the node preflight): the job's python, or the site's host_python with a container.
    host_python: list[str] = []
    # resources.spare_nodes: idle nodes of the allocation that replace a blamed one (rank/before/spares.py)
    spare_nodes: int = 0
    hang_timeout: int | None = None  # launcher.hang_timeout: the watcher's (rank/during/watch.py)
    # notify: {url_from, format, events}: the events the job itself sends (rank/end/notify.py);
    # None when the job has no notify: section or `submit --wait --notify` sends them instead.
    notify: dict | None = None
    version: str = __version__
    warnings: tuple[str, ...] = ()

    @property
    def node_check_in_launch(self) -> bool:
        """The node check runs inside each node's torchrun start (rank/preflight.launch), not
        as a step of its own: one step launch fewer, and hidden behind torch's import. The
        tasks launcher has no per-node process to hold it: it keeps the separate step."""
        return self.preflight and self.multinode and self.launcher != "tasks"

    @property
    def health_in_agent(self) -> bool:
        """The health gate runs in each node's agent process (rank/preflight.agent), without the
        node check: a single node, or the node check off."""
        return bool(self.bootstrap.get("health")) and not (self.preflight and self.multinode)

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


def directive_table(job: Job, run_dir: str, preempt: dict | None) -> list[tuple[str, str | None]]:
    spec, site, r = job.spec, job.site, job.spec.resources
    d: list[tuple[str, str | None]] = [
        ("job-name", spec.name),
        ("nodes", str(r.nodes + r.spare_nodes)),  # the spares are in the allocation, idle
        ("ntasks-per-node", "1"),  # one torchrun per node; it starts the ranks
        ("cpus-per-task", str(procs_per_node(spec) * r.cpus_per_proc)),
    ]
    gpus = gpu_request(job)
    if gpus:
        d.append(gpus)
    for key in ("mem", "mem_per_cpu", "time", "partition", "account", "qos", "constraint"):
        value = getattr(r, key)
        if value is not None:
            d.append((key.replace("_", "-"), str(value)))
    if r.exclusive:
        d.append(("exclusive", None))
    if r.spare_nodes:
        d.append(("no-kill", None))  # a node's failure leaves the allocation (and its spares)
    d.append(("output", f"{run_dir}/logs/slurm-%j.out"))
    d.append(("open-mode", "append"))  # a requeued run keeps appending to the same log
    d += preemption_directives(preempt)
    own = option_values(spec.sbatch)  # sbatch_options.check: none of hpctrain's own
    mine = {k for k, _ in own}
    for extra in site.sbatch_extra:  # checks.check_site: "--key" or "--key=value"
        key, sep, value = extra[2:].partition("=")
        if key not in mine:  # the job's own value wins over the site's
            d.append((key, value if sep else None))
    d += own
    d += chains.directives(job.after, spec.sbatch)
    skip = set(site.sbatch_skip)
    return [(k, v) for k, v in d if k not in skip]


def gpu_request(job: Job) -> tuple[str, str] | None:
    """("gpus-per-node", "a100:4") or ("gres", "gpu:a100:4"): one GPU count, computed once."""
    site, n = job.site, job.spec.resources.gpus_per_node
    if not n:
        return None
    kind = site.gpu_type_on(job.spec.resources.partition)
    count = f"{kind}:{n}" if kind else str(n)
    return ("gpus-per-node", count) if site.gpu_request == "gpus-per-node" else ("gres", f"gpu:{count}")


def health_gate(spec, preflight: bool, launcher: str, cpu_mode: str) -> dict | None:
    """bootstrap.json's "health" (rank/before/health.py): the checks and the GPUs each node must show;
    None: no gate. The node check of a multi-node launch runs it, or else each node's launch
    process before torchrun's agent starts (rank/preflight.agent); the tasks launcher has no such
    process. No CUDA probe where the ranks run on CPU (cpu_mode: on)."""
    h, r = spec.health, spec.resources
    on = h.enabled if h.enabled is not None else r.gpus_per_node > 0
    if not on or (launcher == "tasks" and not (preflight and r.nodes > 1)):
        return None
    return {"expected_gpus": r.gpus_per_node, "gpus": h.gpus, "ecc": h.ecc,
            "row_remap": h.row_remap, "retired_pages": h.retired_pages,
            "foreign_memory_mib": h.foreign_memory_mib, "same_driver": h.same_driver,
            "timeout": h.timeout, "dcgm_diag": h.dcgm_diag,
            "require_nvidia_smi": h.require_nvidia_smi, "cuda": h.cuda and cpu_mode != "on"}


def netfloor(spec, preflight: bool, job: Job) -> dict | None:
    """bootstrap.json's "netfloor" (rank/before/netfloor.py): measured after the node check of a
    multi-node launch, which it needs; None: not measured."""
    floor = spec.health.allreduce_min_gbps
    if floor is None or spec.resources.nodes < 2 or not preflight:
        return None
    return {"min_gbps": floor, "timeout": preemption.preflight_timeout(job)}


def make_plan(job: Job, run_dir: str, code_dir: str | None = None) -> LaunchPlan:
    """The plan of one job in run_dir; code_dir: where the code snapshot lies (None: the job
    runs the live tree)."""
    spec, site = job.spec, job.site
    lib = adapter(spec.library)
    ppn = procs_per_node(spec)
    preempt = preemption.settings(job, backend_class(site.scheduler).preemption)
    directives = directive_table(job, run_dir, preempt)
    gpus = gpu_request(job)
    if gpus and gpus[0] in site.sbatch_skip:
        gpus = None
    env = {k: env_text(v) for k, v in site.env.items()}
    env.update({k: env_text(v) for k, v in spec.env.items()})
    env.update(containers.container_env(spec))
    env.update(lib.env(spec))
    if spec.isaaclab_assets:  # Isaac Lab's own training or a program of the user's that uses it
        env["ISAACSIM_ASSET_ROOT"] = spec.isaaclab_assets
    env.update(preemption.launcher_env(job, preempt, lib.launcher == "torchrun"))
    env.update({k: v for k, v in preemption.tracking_env(run_dir).items() if k not in env})
    env.update({
        "HPCTRAIN_RUN_DIR": run_dir,
        "HPCTRAIN_JOB_NAME": spec.name,
        "HPCTRAIN_SITE": site.name,
        "HPCTRAIN_LIBRARY": spec.library,
    })
    # This interpreter, by default; through a login node, the cluster's (backends/transport.py).
    python = (shlex.split(spec.python) if spec.python is not None
              else lib.python(spec) or transport.for_site(site).python())
    workdir = job.workdir
    if code_dir is not None:
        from ..runs.snapshot import run_workdir
        workdir = run_workdir(code_dir, job.workdir)
        if "/" in python[0] and not python[0].startswith(("/", "$")):
            # A relative interpreter (.venv/bin/python) is not code: it stays where it was.
            python = [os.path.join(job.workdir, python[0]), *python[1:]]
    t = rendezvous_timeouts(job)
    rdzv_conf = ",".join(f"{k}={v}" for k, v in t.items())
    preflight = spec.launcher.preflight if spec.launcher.preflight is not None else spec.resources.nodes > 1
    program = lib.program(spec)
    container = containers.plan(spec, site, run_dir, job.workdir, gpus is not None,
                                [*env, *spec.secrets], runs_isaaclab(lib, spec))
    host_python = shlex.split(site.containers.host_python) if container else python
    # bootstrap.json: the fields of rank/records.RankConfig, every one given here.
    bootstrap = dict(
        program=program,
        library=spec.library,
        cpu_mode=spec.cpu_mode or site.cpu_mode,
        cpu_shims=lib.shims(spec),
        seed=spec.seed,
        threads_from_env="OMP_NUM_THREADS" in env,
        collective_timeout=spec.launcher.collective_timeout,
        launcher=lib.launcher,
        rank_env=dict(lib.rank_env),
        unset_env=list(lib.unset_env),
        chdir_run_dir=lib.run_in_run_dir(spec),
        # The site's NCCL set again, so that a rank started without this script (submitit)
        # gets it too, before any library is imported.
        env={k: env_text(v) for k, v in site.env.items()},
        preempt_signal=preempt["signal"] if preempt else None,
        checkpoint_patterns=lib.checkpoint_patterns(spec),
        resume_args=lib.resume_args(spec),
        # The rank check is a store of torch's: torch libraries started by torchrun only.
        rank_check_timeout=(preemption.preflight_timeout(job) if preflight and lib.torch_library
                            and lib.launcher == "torchrun" else None),
        train_hooks=list(lib.train_hooks) + (["video"] if spec.video else []),
        sample_every=spec.sample_every,
        idle_gpus=({"below": spec.idle_gpus.below, "for": spec.idle_gpus.seconds,
                    "gpus": spec.resources.gpus_per_node}
                   if spec.idle_gpus and spec.sample_every else None),
        health=health_gate(spec, preflight, lib.launcher, spec.cpu_mode or site.cpu_mode),
        netfloor=netfloor(spec, preflight, job),
        slow_ranks=({"factor": spec.health.slow_rank_factor, "window": spec.health.slow_rank_window,
                     "exclude": spec.health.exclude_slow_nodes}
                    if spec.health.slow_rank_factor and spec.resources.nodes * ppn > 1 else None),
    )
    return LaunchPlan(
        name=spec.name, site=site.name, backend=site.scheduler, run_dir=run_dir,
        workdir=workdir, setup_dir=job.workdir, directives=directives, gpus=gpus,
        modules=list(site.modules), module_init=site.module_init,
        setup=list(site.setup) + list(spec.setup),
        env=env, secrets=list(spec.secrets), nnodes=spec.resources.nodes, nproc_per_node=ppn,
        cpus_per_task=ppn * spec.resources.cpus_per_proc, launcher=lib.launcher,
        python=python, program=program,
        head_mode=site.head.mode, head_interface=site.head.interface, head_suffix=site.head.suffix,
        port_fixed=site.port.fixed, port_base=site.port.base, port_slots=max(1, site.port.span // 2),
        rdzv_conf=rdzv_conf, max_restarts=spec.launcher.max_restarts,
        monitor_interval=spec.launcher.monitor_interval, preflight=preflight,
        bootstrap=bootstrap, warnings=job.warnings, preemption=preempt,
        preflight_timeout=preemption.preflight_timeout(job),
        container=container, host_python=host_python,
        hang_timeout=spec.launcher.hang_timeout, spare_nodes=spec.resources.spare_nodes,
        notify=({"url_from": spec.notify.url_from, "format": spec.notify.format,
                 "events": list(spec.notify.events)}
                if spec.notify is not None and job.notify_from_job else None),
        scheduler=backend_class(site.scheduler).plan_values(job),
    )

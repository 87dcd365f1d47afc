"""Checks that need more than types: site limits, consistency, known traps.

Errors raise HpctrainError with where and how to fix; softer problems come back as warnings.
"""
from __future__ import annotations

import os
from typing import Callable

from .errors import HpctrainError
from .spec import TORCH_LIBRARIES, JobSpec, SiteProfile, slurm_seconds

Where = Callable[[tuple], str]


def procs_per_node(spec: JobSpec) -> int:
    r = spec.resources
    return r.procs_per_node or r.gpus_per_node or 1


def check(spec: JobSpec, site: SiteProfile, where: Where) -> list[str]:
    warnings: list[str] = []
    r, lim = spec.resources, site.limits
    ppn = procs_per_node(spec)

    def over(key: str, value, limit, unit: str, fix: str):
        if limit is not None and value > limit:
            raise HpctrainError(f"'resources.{key}' is {value}, but site '{site.name}' allows at "
                                f"most {limit} {unit}", where(("resources", key)), fix)

    if site.scheduler == "local" and r.nodes > 1:
        raise HpctrainError(
            f"site '{site.name}' runs on this machine only, so 'resources.nodes' must be 1 (got {r.nodes})",
            where(("resources", "nodes")), "use a Slurm site (--site NAME) for several nodes, or set nodes: 1")
    over("nodes", r.nodes, lim.max_nodes, "nodes", f"ask for {lim.max_nodes} nodes or fewer")
    over("gpus_per_node", r.gpus_per_node, lim.max_gpus_per_node, "GPUs per node",
         "the nodes do not have that many GPUs")
    over("procs_per_node", ppn, lim.max_procs_per_node, "ranks per node", "start fewer ranks per node")
    if lim.cpus_per_node is not None and ppn * r.cpus_per_proc > lim.cpus_per_node:
        raise HpctrainError(
            f"{ppn} ranks x {r.cpus_per_proc} CPUs = {ppn * r.cpus_per_proc} CPUs per node, but "
            f"site '{site.name}' nodes have {lim.cpus_per_node}",
            where(("resources", "cpus_per_proc")),
            f"lower cpus_per_proc to {max(1, lim.cpus_per_node // ppn)} or procs_per_node")
    if lim.max_time and slurm_seconds(r.time) > slurm_seconds(lim.max_time):
        raise HpctrainError(f"'resources.time' {r.time} is longer than site '{site.name}' allows "
                            f"({lim.max_time})", where(("resources", "time")),
                            f"use {lim.max_time} or less; preemption+requeue continues longer runs")
    if slurm_seconds(r.time) < 1:
        raise HpctrainError("'resources.time' must be at least one minute",
                            where(("resources", "time")), 'e.g. time: "00:30:00"')
    if r.gpus_per_node and ppn > r.gpus_per_node and spec.library in TORCH_LIBRARIES:
        raise HpctrainError(
            f"{ppn} ranks per node share {r.gpus_per_node} GPUs: {spec.library} puts rank i on "
            f"cuda:LOCAL_RANK, so ranks past the last GPU fail with 'invalid device ordinal'",
            where(("resources", "procs_per_node")),
            f"set procs_per_node to {r.gpus_per_node} (or leave it out)")
    if r.gpus_per_node and ppn < r.gpus_per_node:
        warnings.append(f"{r.gpus_per_node - ppn} of {r.gpus_per_node} GPUs per node stay idle "
                        f"(procs_per_node={ppn})")
    if spec.library == "command" and not spec.script:
        raise HpctrainError("library 'command' needs 'script': the program every rank runs",
                            where(("library",)),
                            "add e.g. script: train.py")
    if spec.library == "di_engine" and not (spec.config or spec.script):
        raise HpctrainError("library 'di_engine' needs 'config': the DI-engine config file",
                            where(("library",)), "add e.g. config: dizoo/classic_control/cartpole/config/cartpole_ppo_config.py")
    for name in spec.secrets:
        if name in spec.env or name in site.env:
            raise HpctrainError(f"'{name}' is both a secret and a value in env: a secret's value "
                                "must never be written into the script", where(("secrets",)),
                                f"remove {name} from env; it is passed from your environment")
    if spec.script and not os.path.isabs(spec.script) and not os.path.exists(spec.script) \
            and spec.library == "command":
        warnings.append(f"script '{spec.script}' is not found from {os.getcwd()}: it must exist "
                        "there on the cluster, relative to the directory you submit from")
    from .libraries import adapter  # light: the adapters import no library
    warnings += adapter(spec.library).check(spec, site, where)
    p = spec.preemption
    if p.grace >= p.lead_time + 60 and site.scheduler == "slurm":
        warnings.append(f"preemption.grace ({p.grace}s) is not shorter than lead_time "
                        f"({p.lead_time}s): the job may be killed before it has saved")
    return warnings

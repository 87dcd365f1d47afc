"""How many of a job's processes the local site may start at once: this machine's CPUs bound
them (a study's workers, a sweep's tasks). Beyond a few ranks per CPU the machine does little
but switch between them, and a number such as 1000000 would exhaust its processes."""
from __future__ import annotations

import os

from ..errors import HpctrainError
from ..schema.spec import JobSpec
from .checks import procs_per_node

RANKS_PER_CPU = 4


def local_cpus() -> int:
    """The CPUs this process may run on (a cgroup or taskset may give it fewer than the
    machine has)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def local_slots(spec: JobSpec) -> int:
    """How many runs of the job's shape this machine runs at once (each procs_per_node ranks)."""
    return max(1, RANKS_PER_CPU * local_cpus() // procs_per_node(spec))


def bound_text(spec: JobSpec) -> str:
    """Why the bound is what it is, for an error."""
    return (f"each runs {procs_per_node(spec)} rank(s), and this machine gives hpctrain "
            f"{local_cpus()} CPU(s): at most {local_slots(spec)} at once ({RANKS_PER_CPU} ranks "
            "per CPU)")


def check_local_sweep(spec: JobSpec, ntasks: int, site_name: str, where) -> None:
    """A sweep on the local site runs its tasks as processes of this machine: a `sweep.parallel`
    that would start more of them at once than the bound is refused (without it, the bound is
    the default: job/sweep.py)."""
    parallel = spec.sweep.parallel
    if parallel and min(parallel, ntasks) > local_slots(spec):
        raise HpctrainError(
            f"sweep.parallel is {parallel}: on site '{site_name}' every task is a process of this "
            f"machine; {bound_text(spec)}", where(("sweep", "parallel")),
            f"set sweep.parallel: {local_slots(spec)} or fewer, or run the sweep on a cluster "
            "site (--site NAME)")

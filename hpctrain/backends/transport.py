"""Where a site's scheduler tools run and its runs live: here, or on a cluster reached through
its login node over ssh (slurm/login.py). The one place that asks; the submit path, the plan
and the backends are handed the answer.
"""
from __future__ import annotations

import sys
from pathlib import Path

from .base import Backend


class Here:
    """The scheduler's tools run on this machine, and the run directory is the one it sees."""

    # The code snapshot is copied into the run directory here (runs/snapshot.py).
    snapshots_code = True
    login: str | None = None

    def place(self, run_dir: Path, name: str, run_id: str) -> tuple[Path, Path | None, str | None]:
        """(the run directory the job sees, the mirror of it here or None, the directory the
        job runs from there or None for the job's own)."""
        return run_dir, None, None

    def command(self, words: list[str]) -> list[str]:
        return words

    def backend(self, inner: Backend, run_dir: Path) -> Backend:
        return inner

    def record(self, run_dir: Path) -> dict:
        """What run.json's `extra` keeps, for status/logs/cancel to find their way back."""
        return {}

    def python(self) -> list[str]:
        """The interpreter a job runs when neither it nor its library names one."""
        return [sys.executable]


def for_site(site) -> Here:
    if site.rest is not None:
        from .slurm.rest import ThroughRest
        return ThroughRest(site)
    if site.login:
        from .slurm.login import ThroughLogin
        return ThroughLogin(site)
    return Here()


def scheduler_tools(where, run_dir: Path):
    """A context in which backends/commands.run reaches the site's scheduler tools: here, or
    on the login node a ThroughLogin transport names."""
    from contextlib import nullcontext
    from . import commands
    if where.record(run_dir).get("rest") is not None:
        from .slurm.rest import NoTools
        return commands.on(NoTools())  # the dry run's extras degrade; this host's Slurm is not it
    far = where.record(run_dir).get("remote")
    if not far:
        return nullcontext()
    from .slurm.login import Login
    return commands.on(Login(far))

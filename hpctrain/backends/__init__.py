"""Where a rendered job goes: Slurm (sbatch), this machine (local), or submitit (Python).

Backends take a finished script and a run directory; they never build commands themselves.
"""
from __future__ import annotations

from .base import Backend, JobState


def backend_for(scheduler: str) -> Backend:
    if scheduler == "slurm":
        from .slurm import SlurmBackend
        return SlurmBackend()
    if scheduler == "local":
        from .local import LocalBackend
        return LocalBackend()
    raise ValueError(f"unknown scheduler {scheduler!r}")


def backend_of(record: dict) -> Backend:
    """The backend that answers for a recorded run (runs from Python went through submitit)."""
    if record.get("backend") == "submitit":
        from .submitit import SubmititRuns
        return SubmititRuns()
    return backend_for(record["backend"])


__all__ = ["Backend", "JobState", "backend_for", "backend_of"]

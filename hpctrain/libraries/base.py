"""The adapter interface every library module implements."""
from __future__ import annotations

from typing import Callable

from ..spec import JobSpec

Where = Callable[[tuple], str]


class Adapter:
    """Defaults suit a plain torch.distributed program; libraries override what differs."""

    name = "command"
    # "torchrun": one torchrun per node starts the ranks (torch.distributed libraries).
    # "tasks": Slurm starts one task per rank and the bootstrap maps the task ids (JAX).
    launcher = "torchrun"

    def program(self, spec: JobSpec) -> list[str]:
        """What every rank runs under the bootstrap: [script, *args] (script: path or -m mod)."""
        return [spec.script or "", *map(str, spec.args)]

    def env(self, spec: JobSpec) -> dict[str, str]:
        """Extra environment for every rank."""
        return {}

    def check(self, spec: JobSpec, where: Where) -> list[str]:
        """Library traps: raise HpctrainError for errors, return warnings."""
        return []

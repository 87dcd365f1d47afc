"""A plain program: a PyTorch DDP script or anything torchrun can start."""
from __future__ import annotations

from ..spec import JobSpec
from .base import Adapter


class Command(Adapter):
    """The program saves into $HPCTRAIN_CHECKPOINT_DIR (RUN_DIR/checkpoints, set by the
    bootstrap) and, on a restart, finds the newest one in $HPCTRAIN_RESUME_FROM."""

    name = "command"

    def checkpoint_patterns(self, spec: JobSpec) -> list[str]:
        return ["checkpoints/*"]


ADAPTER = Command()

"""A plain program: a PyTorch DDP script or anything torchrun can start."""
from __future__ import annotations

from ..spec import JobSpec
from .base import Adapter


class Command(Adapter):
    """The program saves into $HPCTRAIN_CHECKPOINT_DIR (RUN_DIR/checkpoints, set by the
    bootstrap) and, on a restart, finds the newest one in $HPCTRAIN_RESUME_FROM."""

    name = "command"
    # A plain script picks its own device; hpctrain's pin falls back to cuda:0 if masked.
    needs_all_gpus = False
    checkpoint_globs = ("checkpoints/*",)


ADAPTER = Command()

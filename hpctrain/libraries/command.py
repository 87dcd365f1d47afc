"""A plain program: a PyTorch DDP script or anything torchrun can start."""
from __future__ import annotations

from .base import Adapter


class Command(Adapter):
    name = "command"
    # A plain script picks its own device; hpctrain's pin falls back to cuda:0 if masked.
    needs_all_gpus = False


ADAPTER = Command()

"""A plain program: a PyTorch DDP script or anything torchrun can start."""
from __future__ import annotations

from .base import Adapter


class Command(Adapter):
    name = "command"


ADAPTER = Command()

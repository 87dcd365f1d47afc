"""A plain program: a PyTorch DDP script or anything torchrun can start."""
from __future__ import annotations

import os

from .base import Adapter


class Command(Adapter):
    """The program saves into $HPCTRAIN_CHECKPOINT_DIR (RUN_DIR/checkpoints, set by the
    bootstrap) and, on a restart, finds the newest one in $HPCTRAIN_RESUME_FROM."""

    name = "command"
    # A plain script picks its own device; hpctrain's pin falls back to cuda:0 if masked.
    needs_all_gpus = False
    checkpoint_globs = ("checkpoints/*",)

    def check(self, spec, site, where):
        warnings = super().check(spec, site, where)
        # No script is allowed: such a job runs a Python function (hpctrain.submit_function).
        if spec.script and not spec.script.startswith("-") and not os.path.isabs(spec.script) \
                and not os.path.exists(spec.script):
            warnings.append(f"script '{spec.script}' is not found from {os.getcwd()}: it must "
                            "exist there on the cluster, relative to the directory you submit from")
        return warnings


ADAPTER = Command()

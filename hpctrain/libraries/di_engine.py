"""DI-engine: torchrun over the config file (its __main__ runs serial_pipeline in DDPContext).

- ding's dist_init reads SLURM_LOCALID / SLURM_NTASKS before RANK / WORLD_SIZE: under one
  torchrun per node every rank would be rank 0 of a world of N nodes. The bootstrap unsets them.
- DI-engine writes ./<exp_name>/…: ranks start in the run directory so the run keeps it.
- The config must set policy.multi_gpu=True, or every rank trains alone.
"""
from __future__ import annotations

import os
import re

from ..errors import HpctrainError
from .base import Adapter

_MULTI_GPU = re.compile(r"multi_gpu\s*[=:]\s*True")


class DiEngine(Adapter):
    name = "di_engine"
    cpu_shims = ("torch", "di_engine")
    # The serial pipeline's evaluator (by env step, by train iteration); the middleware logger's.
    main_scalars = ("evaluator_step/reward_mean", "evaluator_iter/reward_mean",
                    "basic/eval_episode_return_mean")
    train_hooks = ("di_engine",)
    unset_env = ("SLURM_LOCALID", "SLURM_NTASKS")
    # ./<exp_name>/ckpt/iteration_<n>.pth.tar (rank 0, the learner's save hook). Resuming is a
    # config setting (policy.learn.learner.hook.load_ckpt_before_run), not a flag: none here.
    checkpoint_globs = ("*/ckpt/iteration_*.pth.tar",)
    resume_template = ()

    def program(self, spec):
        return [spec.config or spec.script or "", *map(str, spec.args)]

    def run_in_run_dir(self, spec):
        return True

    def check(self, spec, site, where):
        warnings = super().check(spec, site, where)
        path = spec.config or spec.script
        if not path:
            raise HpctrainError("library 'di_engine' needs 'config': the DI-engine config file",
                                where(("library",)), "add e.g. config: "
                                "dizoo/classic_control/cartpole/config/cartpole_ppo_config.py")
        r = spec.resources
        ranks = r.nodes * (r.procs_per_node or r.gpus_per_node or 1)
        if ranks > 1 and path and os.path.isfile(path):
            with open(path, errors="replace") as f:
                if not _MULTI_GPU.search(f.read()):
                    warnings.append(f"{path}: no 'multi_gpu=True' in the config: on {ranks} ranks "
                                    "every rank would train alone. Fix: set policy.multi_gpu=True")
        if r.gpus_per_node and r.nodes > 1:
            warnings.append("DI-engine's LogReduceHook moves log tensors to cuda:<global rank>: on "
                            "several GPU nodes ranks past the node's GPU count fail. Fix: one node")
        return warnings


ADAPTER = DiEngine()

"""rsl-rl: torchrun; distributed whenever WORLD_SIZE > 1 (the runner builds the process group).

Trap: Isaac Lab 2.x's rsl_rl train.py seeds with `seed + LOCAL_RANK`, so rank r of every node
gets the same seed and the nodes collect the same experience (3.0 adds the global RANK).
"""
from __future__ import annotations

from .isaaclab import IsaacLabAdapter


class RslRl(IsaacLabAdapter):
    name = "rsl_rl"
    cpu_shims = ("torch", "rsl_rl")
    main_scalars = ("Train/mean_reward",)  # utils/logger.py, by learning iteration
    train_hooks = ("rsl_rl",)
    train_dir = "rsl_rl"
    play_cpu_overrides = ("agent.device=cpu",)  # isaaclab_rl/rsl_rl/rl_cfg.py: cuda:0
    # examples/rl/rsl_rl_pendulum.py: runner.save() names, --checkpoint PATH.
    checkpoint_globs = ("checkpoints/model_*.pt",)
    resume_template = ("--checkpoint", "{checkpoint}")
    restored_from_checkpoint = ((r"(^|\.)learning_rate$", (
        "rsl_rl's runner.load() restores the optimizer's state, learning rate included, from "
        "the checkpoint, and its 'fixed' schedule never sets it again (its 'adaptive' one "
        "replaces it by the KL rule): a new learning_rate would not take effect")),)
    # Isaac Lab: logs/rsl_rl/<experiment>/<timestamp>[_<run name>]/model_<iter>.pt. Its
    # --load_run is a run-directory regex and --checkpoint a file-name regex under logs/rsl_rl/,
    # each matched from the start of a name (re.match): given exactly, escaped and anchored.
    isaaclab_checkpoint_globs = ("logs/rsl_rl/*/*/model_*.pt",)
    isaaclab_resume_template = ("--resume", "--load_run", "{dirname_re}", "--checkpoint",
                                "{name_re}")

    def check(self, spec, site, where):
        warnings = super().check(spec, site, where)
        if self.isaaclab_mode(spec) and self.generation(spec) < 3 and spec.resources.nodes > 1:
            warnings.append(
                "Isaac Lab's rsl_rl train.py seeds each rank with seed + LOCAL_RANK: on "
                f"{spec.resources.nodes} nodes, rank r of every node gets the same seed and "
                "collects the same experience. Fix: seed from the global rank in your train.py "
                "(the bootstrap exports HPCTRAIN_SEED = seed + global rank), e.g. "
                "agent_cfg.seed = int(os.environ['HPCTRAIN_SEED'])")
        return warnings


ADAPTER = RslRl()

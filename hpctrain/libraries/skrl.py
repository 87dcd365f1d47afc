"""skrl with PyTorch: torchrun; distributed when WORLD_SIZE > 1, decided at `import skrl`."""
from __future__ import annotations

from .isaaclab import IsaacLabAdapter


class Skrl(IsaacLabAdapter):
    name = "skrl"
    main_scalars = ("Reward / Total reward (mean)",)  # agents/*/base.py, by timestep
    train_hooks = ("skrl",)
    train_dir = "skrl"
    # examples/rl/skrl_torch_pendulum.py: agent.save() names, --checkpoint PATH.
    checkpoint_globs = ("checkpoints/agent_*.pt",)
    resume_template = ("--checkpoint", "{checkpoint}")
    restored_from_checkpoint = ((r"(^|\.)learning_rate$", (
        "skrl's agent.load() restores the optimizer's state, learning rate included, from the "
        "checkpoint: a new learning_rate would not take effect")),)
    # Isaac Lab: logs/skrl/<dir>/<timestamp>_<algo>_torch[_<name>]/checkpoints/agent_<step>.pt.
    isaaclab_checkpoint_globs = ("logs/skrl/*/*/checkpoints/agent_*.pt",)
    isaaclab_resume_template = ("--checkpoint", "{checkpoint}")


ADAPTER = Skrl()

"""skrl with JAX: one Slurm task per rank, JAX's variables set by the bootstrap.

skrl's own launcher (`python -m skrl.utils.distributed.jax`) starts only the local node's
processes and exits 0 whatever they do. Instead srun starts every rank (block distribution: rank 0
on the first node, the coordinator) and each rank's bootstrap maps Slurm's task ids to
JAX_RANK/JAX_LOCAL_RANK/JAX_WORLD_SIZE — what skrl's launcher would have set — so a failed rank
fails the job.
"""
from __future__ import annotations

from .isaaclab import IsaacLabAdapter
from .skrl import Skrl


class SkrlJax(IsaacLabAdapter):
    name = "skrl_jax"
    torch_library = False
    cpu_shims = ("jax",)
    main_scalars = ("Reward / Total reward (mean)",)
    train_hooks = ("skrl_jax",)
    train_dir = "skrl"
    lab_library = "skrl"
    launcher = "tasks"
    needs_all_gpus = False  # jax.distributed takes local_device_ids=JAX_LOCAL_RANK itself
    rank_env = {
        "JAX_RANK": "{rank}",
        "JAX_LOCAL_RANK": "{local_rank}",
        "JAX_WORLD_SIZE": "{world_size}",
        "JAX_COORDINATOR_ADDR": "{head}",
        "JAX_COORDINATOR_PORT": "{spare_port}",  # the rendezvous port's pair: never shared
    }
    extra_isaaclab_args = ("--ml_framework", "jax")
    # examples/rl/skrl_jax_pendulum.py: agent.save() names (parameters only), --checkpoint PATH.
    checkpoint_globs = ("checkpoints/agent_*.pickle",)
    resume_template = ("--checkpoint", "{checkpoint}")
    restored_from_checkpoint = Skrl.restored_from_checkpoint  # the same agent.load()
    isaaclab_checkpoint_globs = ("logs/skrl/*/*/checkpoints/agent_*.pickle",)
    isaaclab_resume_template = ("--checkpoint", "{checkpoint}")

    def program(self, spec):
        out = super().program(spec)
        if self.isaaclab_mode(spec) and "--ml_framework" in out:
            # Isaac Lab's documented order: … --distributed --ml_framework jax [--seed] ARGS
            i = out.index("--ml_framework")
            if out[i + 1:i + 2] != ["jax"]:
                out.insert(i + 1, "jax")
        return out


ADAPTER = SkrlJax()

"""rl-games: torchrun; multi-GPU via params.config.multi_gpu (Isaac Lab's --distributed sets it).

Trap: `schedule_type: standard` with the adaptive learning rate makes ranks != 0 keep the initial
LR (rl-games updates it on rank 0 only in that mode): the weights drift apart. `legacy` (the
default) stays identical. Settings arrive as Isaac Lab's Hydra overrides in `args`.
"""
from __future__ import annotations

from .isaaclab import IsaacLabAdapter

_PREFIX = "agent.params.config."


def overrides(args) -> dict[str, str]:
    """Hydra overrides `agent.params.config.KEY=VALUE` in args -> {KEY: VALUE}."""
    out = {}
    for a in map(str, args):
        key, sep, value = a.lstrip("+").partition("=")
        if sep and key.startswith(_PREFIX):
            out[key[len(_PREFIX):]] = value.strip().strip("'\"").lower()
    return out


class RlGames(IsaacLabAdapter):
    name = "rl_games"
    cpu_shims = ("torch", "rl_games")
    # a2c_common.py: the mean game reward by epoch, and by environment frame.
    main_scalars = ("rewards/iter", "rewards/step")
    train_hooks = ("rl_games",)
    train_dir = "rl_games"
    # The task's rl_games_*_ppo_cfg.yaml: params.config.device and device_name are cuda:0.
    play_cpu_overrides = ("agent.params.config.device=cpu", "agent.params.config.device_name=cpu")
    # examples/rl/rl_games_pendulum.py (--out defaults to the run dir): rl-games' own file names.
    checkpoint_globs = ("checkpoints/nn/*.pth",)
    resume_template = ("--checkpoint", "{checkpoint}")
    # Isaac Lab: logs/rl_games/<config name>/<timestamp>/nn/*.pth, --checkpoint PATH.
    isaaclab_checkpoint_globs = ("logs/rl_games/*/*/nn/*.pth",)
    isaaclab_resume_template = ("--checkpoint", "{checkpoint}")

    def check(self, spec, site, where):
        warnings = super().check(spec, site, where)
        r = spec.resources
        ranks = r.nodes * (r.procs_per_node or r.gpus_per_node or 1)
        cfg = overrides(spec.args)
        # Isaac Lab's rl-games configs use the adaptive schedule unless the job says otherwise.
        adaptive = cfg.get("lr_schedule", "adaptive") == "adaptive"
        if ranks > 1 and cfg.get("schedule_type") == "standard" and adaptive:
            warnings.append(
                f"{where(('args',))}: rl-games with schedule_type=standard and the adaptive "
                f"learning rate on {ranks} ranks: only rank 0 adapts its learning rate, the other "
                "ranks keep the initial one and their weights drift apart. Fix: "
                "agent.params.config.schedule_type=legacy (rl-games' default), or a fixed "
                "schedule (agent.params.config.lr_schedule=linear)")
        return warnings


ADAPTER = RlGames()

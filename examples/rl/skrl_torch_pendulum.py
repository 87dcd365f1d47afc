"""Tiny distributed PPO with skrl (2.x, PyTorch) on gymnasium Pendulum-v1.

skrl decides at `import skrl` whether the run is distributed (WORLD_SIZE > 1, set by torchrun) and
then creates the process group itself; its agents broadcast rank 0's weights at init and
all-reduce gradients at every update. Like Isaac Lab's skrl train.py, this script builds the
environment, the models, a PPO agent and a SequentialTrainer, loads --checkpoint with
agent.load() if given and calls trainer.train() once: skrl itself writes
DIR/checkpoints/agent_<timestep>.pt every --save-interval updates (rank 0).

It installs no signal handler: under hpctrain, the bootstrap's skrl hooks save a checkpoint
after the next update following SIGTERM or the preemption signal and let train() return, and on
the next run hpctrain passes that checkpoint as --checkpoint; a run resumed so continues skrl's
timesteps from the checkpoint's up to --updates in all (hpctrain/rank/during/train_hooks.py). Run by
hand, a resumed trainer starts again at timestep 0, as skrl does.

Run with hpctrain (job.yaml):
    library: skrl
    script: examples/rl/skrl_torch_pendulum.py
    args: [--updates, "20"]
Plain torchrun, one node, 2 processes (on a GPU machine; on CPU skrl needs hpctrain's CPU shims,
installed before `import skrl`, see hpctrain/rank/before/cpu_shims.py):
    torchrun --standalone --nproc-per-node=2 examples/rl/skrl_torch_pendulum.py --updates 5 --out /tmp/skrl
Resume (skrl's agent.load: models, optimizer, preprocessors):
    torchrun ... examples/rl/skrl_torch_pendulum.py --checkpoint /tmp/skrl/checkpoints/agent_160.pt

Outputs: DIR/checkpoints/agent_<timestep>.pt (rank 0, skrl's own checkpoints), the agent's
config in DIR/params/agent.yaml (where Isaac Lab's skrl train.py saves it; `hpctrain export`
reads it),
DIR/results/rank-<RANK>.json on every rank (sha256 of the policy+value weights before the first
update and at the end, skrl's value loss of the first and the last update) and
DIR/results/attempts.jsonl (one line per rank and run: update started from, SLURM_RESTART_COUNT,
update reached).
"""

import argparse
import glob
import hashlib
import json
import os
import re
import socket
import time

import gymnasium as gym
import torch
import yaml

# NOTE: `import skrl` (any skrl import) creates the process group when WORLD_SIZE > 1.
from skrl import config as skrl_config
from skrl.agents.torch.ppo import PPO, PPO_CFG
from skrl.envs.wrappers.torch import wrap_env
from skrl.memories.torch import RandomMemory
from skrl.trainers.torch import SequentialTrainer
from skrl.utils import set_seed
from skrl.utils.model_instantiators.torch import deterministic_model, gaussian_model


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("HPCTRAIN_RUN_DIR", "./out"), help="output directory")
    p.add_argument("--seed", type=int, default=42, help="base seed (skrl adds the rank)")
    p.add_argument("--updates", type=int, default=5, help="PPO updates: the trainer's timesteps / --steps")
    p.add_argument("--save-interval", type=int, default=0,
                   help="skrl's checkpoint_interval, in updates (0: once, at the end)")
    p.add_argument("--sleep", type=float, default=0.0,
                   help="seconds to sleep after each update (lets a test preempt it mid-run)")
    p.add_argument("--checkpoint", default=None, help="resume from this checkpoint")
    p.add_argument("--num-envs", type=int, default=32, help="environments per rank")
    p.add_argument("--steps", type=int, default=32, help="steps per environment per update")
    return p.parse_args()


# The models as skrl's model instantiators build them from a config, as Isaac Lab's skrl train.py
# does from its agent YAML: the config saved beside the checkpoints says what the policy is.
MODELS = {
    "separate": True,
    "policy": {"class": "GaussianMixin", "clip_actions": True, "initial_log_std": 0.0,
               "network": [{"name": "net", "input": "OBSERVATIONS", "layers": [64, 64],
                            "activations": "elu"}],
               "output": "2.0 * tanh(ACTIONS)"},
    "value": {"class": "DeterministicMixin", "clip_actions": False,
              "network": [{"name": "net", "input": "OBSERVATIONS", "layers": [64, 64],
                           "activations": "elu"}],
              "output": "ONE"},
}


def build_models(observation_space, action_space, device) -> dict:
    def kwargs(cfg):
        return {k: v for k, v in cfg.items() if k != "class"}
    spaces = {"observation_space": observation_space, "action_space": action_space, "device": device}
    models = {"policy": gaussian_model(**spaces, **kwargs(MODELS["policy"])),
              "value": deterministic_model(**spaces, **kwargs(MODELS["value"]))}
    for role, model in models.items():
        model.init_state_dict(role=role)  # the instantiators' layers are lazy (as skrl's Runner does)
    return models


def save_config(experiment_dir: str) -> None:
    """DIR/params/agent.yaml, where Isaac Lab's skrl train.py saves the agent's config: what the
    policy is (hpctrain export rebuilds it from this and the checkpoint)."""
    os.makedirs(os.path.join(experiment_dir, "params"), exist_ok=True)
    with open(os.path.join(experiment_dir, "params", "agent.yaml"), "w") as f:
        yaml.safe_dump({"models": MODELS, "agent": {"class": "PPO", "state_preprocessor": None}}, f)


class RecordingPPO(PPO):
    """skrl's PPO; sleeps SLEEP seconds after each update (--sleep)."""

    SLEEP = 0.0

    def update(self, *, timestep: int, timesteps: int) -> None:
        super().update(timestep=timestep, timesteps=timesteps)
        time.sleep(self.SLEEP)


def params_digest(*modules) -> str:
    h = hashlib.sha256()
    for module in modules:
        for name, tensor in module.state_dict().items():
            h.update(name.encode())
            h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def main():
    args = parse_args()
    rank, world = skrl_config.torch.rank, skrl_config.torch.world_size  # from RANK / WORLD_SIZE
    local_rank = skrl_config.torch.local_rank
    device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    set_seed(args.seed)  # skrl adds the rank in distributed runs

    envs = gym.make_vec("Pendulum-v1", num_envs=args.num_envs, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    envs.reset(seed=args.seed + rank)
    env = wrap_env(envs, wrapper="gymnasium", verbose=False)

    models = build_models(env.observation_space, env.action_space, device)
    if rank == 0:
        save_config(os.path.abspath(args.out))
    cfg = PPO_CFG(rollouts=args.steps, learning_epochs=4, mini_batches=4, learning_rate=3e-4,
                  discount_factor=0.99, gae_lambda=0.95, grad_norm_clip=1.0, value_loss_scale=1.0,
                  time_limit_bootstrap=True, rewards_shaper=lambda r, *a, **k: r * 0.1)
    # No TensorBoard. Then skrl never flushes (and clears) the statistics it tracks for it either:
    # agent.tracking_data["Loss / Value loss"] keeps one value per update, read at the end.
    cfg.experiment.write_interval = 0
    # skrl's own checkpoints, DIR/checkpoints/agent_<timestep>.pt: the experiment directory is DIR.
    cfg.experiment.directory, cfg.experiment.experiment_name = os.path.split(os.path.abspath(args.out))
    cfg.experiment.checkpoint_interval = (args.save_interval or args.updates) * args.steps
    memory = RandomMemory(memory_size=args.steps, num_envs=env.num_envs, device=device)
    RecordingPPO.SLEEP = args.sleep
    agent = RecordingPPO(models=models, memory=memory, observation_space=env.observation_space,
                         action_space=env.action_space, device=device, cfg=cfg)

    resumed_from = 0
    if args.checkpoint:
        agent.load(args.checkpoint)  # every rank loads the same file
        # For the result file: skrl names checkpoints by timestep; an update is --steps of them.
        resumed_from = int(re.search(r"agent_(\d+)", os.path.basename(args.checkpoint)).group(1)) // args.steps
    attempt = {"rank": rank, "world_size": world, "started_from": resumed_from,
               "resume_from": args.checkpoint,
               "job_restart": int(os.environ.get("SLURM_RESTART_COUNT", 0)),
               "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname()}
    print(f"[rank {rank}] starting at update {resumed_from}", flush=True)
    # The agent's constructor broadcast rank 0's parameters (each rank built its own from its
    # own seed) and a resume loaded the same file on every rank: these are the weights that train.
    initial_digest = params_digest(agent.policy, agent.value)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={
        "timesteps": args.updates * args.steps, "headless": True, "disable_progressbar": True,
        "close_environment_at_exit": False})
    t0 = time.time()
    trainer.train()
    wall = time.time() - t0

    losses = agent.tracking_data["Loss / Value loss"]  # this run's updates (none if nothing was left)
    reached = resumed_from + len(losses)
    saved = sorted(glob.glob(os.path.join(args.out, "checkpoints", "agent_*.pt")), key=os.path.getmtime)
    result = {
        "library": "skrl", "rank": rank, "world_size": world, "local_rank": local_rank,
        "hostname": socket.gethostname(), "updates": args.updates, "resumed_from": resumed_from,
        "iteration": reached,
        "initial_params_sha256": initial_digest, "params_sha256": params_digest(agent.policy, agent.value),
        "loss": "value loss (skrl tracking_data['Loss / Value loss'])",
        "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
        "checkpoint": saved[-1] if rank == 0 and saved else None, "train_wall_s": round(wall, 3),
    }
    attempt.update(reached=reached, params_sha256=result["params_sha256"])
    os.makedirs(os.path.join(args.out, "results"), exist_ok=True)
    with open(os.path.join(args.out, "results", "attempts.jsonl"), "a") as f:
        f.write(json.dumps(attempt) + "\n")
    with open(os.path.join(args.out, "results", f"rank-{rank}.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(f"[rank {rank}] done at update {reached}: {json.dumps(result)}", flush=True)
    env.close()


if __name__ == "__main__":
    main()

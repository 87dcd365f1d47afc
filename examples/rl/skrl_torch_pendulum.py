"""Tiny distributed PPO with skrl (2.x, PyTorch) on gymnasium Pendulum-v1.

skrl decides at `import skrl` whether the run is distributed (WORLD_SIZE > 1, set by torchrun) and
then creates the process group itself; its agents broadcast rank 0's weights at init and
all-reduce gradients at every update. This script builds a vectorised Pendulum, a PPO agent and a
SequentialTrainer, saves a checkpoint on rank 0 and writes one result file per rank.

Run with hpctrain (job.yaml):
    library: skrl
    script: examples/rl/skrl_torch_pendulum.py
    args: [--updates, "20"]
Plain torchrun, one node, 2 processes (on a GPU machine; on CPU skrl needs hpctrain's CPU shims,
installed before `import skrl`, see hpctrain/cpu_mode.py):
    torchrun --standalone --nproc-per-node=2 examples/rl/skrl_torch_pendulum.py --updates 5 --out /tmp/skrl
Resume (skrl's agent.load: models, optimizer, preprocessors and our update counter):
    torchrun ... examples/rl/skrl_torch_pendulum.py --checkpoint /tmp/skrl/checkpoints/agent_160.pt

Outputs: DIR/checkpoints/agent_<timestep>.pt (rank 0, skrl's agent.save) and
DIR/results/rank-<RANK>.json on every rank.
"""

import argparse
import hashlib
import json
import os
import socket
import time

import gymnasium as gym
import torch
import torch.nn as nn

# NOTE: `import skrl` (any skrl import) creates the process group when WORLD_SIZE > 1.
from skrl import config as skrl_config
from skrl.agents.torch.ppo import PPO, PPO_CFG
from skrl.envs.wrappers.torch import wrap_env
from skrl.memories.torch import RandomMemory
from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
from skrl.trainers.torch import SequentialTrainer
from skrl.utils import set_seed


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("HPCTRAIN_RUN_DIR", "./out"), help="output directory")
    p.add_argument("--seed", type=int, default=42, help="base seed (skrl adds the rank)")
    p.add_argument("--updates", type=int, default=5, help="PPO updates to run")
    p.add_argument("--checkpoint", default=None, help="resume from this checkpoint")
    p.add_argument("--num-envs", type=int, default=32, help="environments per rank")
    p.add_argument("--steps", type=int, default=32, help="steps per environment per update")
    return p.parse_args()


class Policy(GaussianMixin, Model):
    def __init__(self, observation_space, action_space, device):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        GaussianMixin.__init__(self, clip_actions=True)
        self.net = nn.Sequential(nn.Linear(self.num_observations, 64), nn.ELU(),
                                 nn.Linear(64, 64), nn.ELU(), nn.Linear(64, self.num_actions))
        self.log_std = nn.Parameter(torch.zeros(self.num_actions))

    def compute(self, inputs, role=""):
        return 2.0 * torch.tanh(self.net(inputs["observations"])), {"log_std": self.log_std}


class Value(DeterministicMixin, Model):
    def __init__(self, observation_space, action_space, device):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        DeterministicMixin.__init__(self)
        self.net = nn.Sequential(nn.Linear(self.num_observations, 64), nn.ELU(),
                                 nn.Linear(64, 64), nn.ELU(), nn.Linear(64, 1))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


class Progress:
    """Update counter stored inside skrl's own checkpoint (anything with state_dict/load_state_dict)."""

    def __init__(self):
        self.updates = 0

    def state_dict(self):
        return {"updates": self.updates}

    def load_state_dict(self, state):
        self.updates = int(state["updates"])


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

    models = {"policy": Policy(env.observation_space, env.action_space, device),
              "value": Value(env.observation_space, env.action_space, device)}
    cfg = PPO_CFG(rollouts=args.steps, learning_epochs=4, mini_batches=4, learning_rate=3e-4,
                  discount_factor=0.99, gae_lambda=0.95, grad_norm_clip=1.0, value_loss_scale=1.0,
                  time_limit_bootstrap=True, rewards_shaper=lambda r, *a, **k: r * 0.1)
    cfg.experiment.write_interval = 0  # no TensorBoard; we save explicitly below
    cfg.experiment.checkpoint_interval = 0
    memory = RandomMemory(memory_size=args.steps, num_envs=env.num_envs, device=device)
    agent = PPO(models=models, memory=memory, observation_space=env.observation_space,
                action_space=env.action_space, device=device, cfg=cfg)
    progress = Progress()
    agent.checkpoint_modules["progress"] = progress

    if args.checkpoint:
        agent.load(args.checkpoint)  # every rank loads the same file
    resumed_from = progress.updates

    # The trainer calls agent.init(), which broadcasts rank 0's parameters to all ranks.
    trainer = SequentialTrainer(env=env, agents=agent, cfg={
        "timesteps": args.updates * args.steps, "headless": True, "disable_progressbar": True,
        "close_environment_at_exit": False})
    t0 = time.time()
    trainer.train()
    wall = time.time() - t0
    progress.updates = resumed_from + args.updates

    ckpt = None
    if rank == 0:
        os.makedirs(os.path.join(args.out, "checkpoints"), exist_ok=True)
        ckpt = os.path.join(args.out, "checkpoints", f"agent_{progress.updates * args.steps}.pt")
        agent.save(ckpt)
    result = {
        "library": "skrl", "rank": rank, "world_size": world, "local_rank": local_rank,
        "hostname": socket.gethostname(), "updates": args.updates, "resumed_from": resumed_from,
        "iteration": progress.updates, "params_sha256": params_digest(agent.policy, agent.value),
        "checkpoint": ckpt, "train_wall_s": round(wall, 3),
    }
    os.makedirs(os.path.join(args.out, "results"), exist_ok=True)
    with open(os.path.join(args.out, "results", f"rank-{rank}.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(f"[rank {rank}] done: {json.dumps(result)}")
    env.close()


if __name__ == "__main__":
    main()

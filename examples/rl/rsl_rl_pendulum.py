"""Tiny distributed PPO with rsl-rl (rsl-rl-lib 5.x) on gymnasium Pendulum-v1.

rsl-rl goes distributed by itself when WORLD_SIZE > 1 (set by torchrun): its OnPolicyRunner creates
the process group, broadcasts rank 0's weights and all-reduces gradients. This script only builds a
vectorised Pendulum, hands it to the runner, saves a checkpoint on rank 0 and writes one result
file per rank.

Run with hpctrain (job.yaml):
    library: rsl_rl
    script: examples/rl/rsl_rl_pendulum.py
    args: [--updates, "20"]
Plain torchrun, one node, 2 processes (on a GPU machine; on CPU rsl-rl needs hpctrain's CPU shims,
see hpctrain/cpu_mode.py):
    torchrun --standalone --nproc-per-node=2 examples/rl/rsl_rl_pendulum.py --updates 5 --out /tmp/rsl
Resume:
    torchrun ... examples/rl/rsl_rl_pendulum.py --checkpoint /tmp/rsl/checkpoints/model_4.pt --out /tmp/rsl2

Outputs: DIR/checkpoints/model_<iter>.pt (rank 0, rsl-rl's own format; "iter" inside) and
DIR/results/rank-<RANK>.json on every rank (sha256 of the final actor+critic weights).
"""

import argparse
import hashlib
import json
import os
import socket
import time

import gymnasium as gym
import numpy as np
import torch
from rsl_rl.env import VecEnv
from rsl_rl.runners import OnPolicyRunner
from tensordict import TensorDict


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("HPCTRAIN_RUN_DIR", "./out"), help="output directory")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--updates", type=int, default=5, help="PPO iterations to run")
    p.add_argument("--checkpoint", default=None, help="resume from this checkpoint")
    p.add_argument("--num-envs", type=int, default=32, help="environments per rank")
    p.add_argument("--steps", type=int, default=32, help="steps per environment per update")
    return p.parse_args()


class PendulumVecEnv(VecEnv):
    """gymnasium's vectorised Pendulum-v1 behind rsl-rl's VecEnv interface (torch in, torch out)."""

    def __init__(self, num_envs: int, seed: int, device: str):
        self.envs = gym.make_vec(
            "Pendulum-v1", num_envs=num_envs, vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        )
        self.num_envs, self.num_actions, self.max_episode_length = num_envs, 1, 200
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long)
        self.device, self.cfg = device, {}
        obs, _ = self.envs.reset(seed=seed)
        self.obs = torch.as_tensor(obs, dtype=torch.float32)

    def get_observations(self) -> TensorDict:
        return TensorDict({"policy": self.obs}, batch_size=[self.num_envs], device=self.device)

    def step(self, actions):
        act = actions.clamp(-2.0, 2.0).cpu().numpy().astype(np.float32)
        obs, rew, term, trunc, _ = self.envs.step(act)
        dones = torch.as_tensor(term | trunc)
        self.episode_length_buf = torch.where(dones, 0, self.episode_length_buf + 1)
        self.obs = torch.as_tensor(obs, dtype=torch.float32)
        extras = {"time_outs": torch.as_tensor(trunc).to(self.device)}
        # Pendulum rewards lie in [-16, 0]; scale them so the value loss stays small.
        rew = torch.as_tensor(rew, dtype=torch.float32) * 0.1
        return self.get_observations(), rew.to(self.device), dones.long().to(self.device), extras


def train_cfg(steps: int) -> dict:
    mlp = {"class_name": "MLPModel", "hidden_dims": [64, 64], "activation": "elu", "obs_normalization": False}
    return {
        "num_steps_per_env": steps,
        "save_interval": 10**9,  # we save once at the end (below)
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "actor": {**mlp, "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
        "critic": dict(mlp),
        "algorithm": {"class_name": "PPO", "learning_rate": 1e-3, "num_learning_epochs": 4,
                      "num_mini_batches": 4, "schedule": "adaptive", "desired_kl": 0.01},
        "logger": "tensorboard",
    }


def params_digest(*modules) -> str:
    h = hashlib.sha256()
    for module in modules:
        for name, tensor in module.state_dict().items():
            h.update(name.encode())
            h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def main():
    args = parse_args()
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    # rsl-rl insists on cuda:LOCAL_RANK when distributed; on CPU use cpu (hpctrain's shim allows it).
    device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    # rsl-rl does not offset seeds per rank: do it here, so ranks collect different experience.
    torch.manual_seed(args.seed + rank)
    env = PendulumVecEnv(args.num_envs, seed=args.seed + rank, device=device)

    runner = OnPolicyRunner(env, train_cfg(args.steps), log_dir=None, device=device)
    resumed_from, done_before = 0, 0
    if args.checkpoint:
        infos = runner.load(args.checkpoint, map_location=device)  # every rank loads the same file
        resumed_from = runner.current_learning_iteration
        done_before = (infos or {}).get("updates_total", resumed_from)

    t0 = time.time()
    runner.learn(num_learning_iterations=args.updates)
    wall = time.time() - t0
    updates_total = done_before + args.updates

    ckpt = None
    if rank == 0:  # rsl-rl's own save; "iter" = runner.current_learning_iteration
        os.makedirs(os.path.join(args.out, "checkpoints"), exist_ok=True)
        ckpt = os.path.join(args.out, "checkpoints", f"model_{runner.current_learning_iteration}.pt")
        runner.save(ckpt, infos={"updates_total": updates_total})

    result = {
        "library": "rsl_rl", "rank": rank, "world_size": world, "local_rank": local_rank,
        "hostname": socket.gethostname(), "updates": args.updates, "resumed_from": resumed_from,
        "iteration": runner.current_learning_iteration, "updates_total": updates_total,
        "params_sha256": params_digest(runner.alg._raw_actor, runner.alg._raw_critic),
        "checkpoint": ckpt, "train_wall_s": round(wall, 3),
    }
    os.makedirs(os.path.join(args.out, "results"), exist_ok=True)
    with open(os.path.join(args.out, "results", f"rank-{rank}.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(f"[rank {rank}] done: {json.dumps(result)}")


if __name__ == "__main__":
    main()

"""Tiny distributed PPO with rsl-rl (rsl-rl-lib 5.x) on gymnasium Pendulum-v1.

rsl-rl goes distributed by itself when WORLD_SIZE > 1 (set by torchrun): its OnPolicyRunner creates
the process group, broadcasts rank 0's weights and all-reduces gradients. Like Isaac Lab's
rsl_rl train.py, this script builds the environment and the runner, loads --checkpoint if given,
and calls runner.learn(max_iterations) once: rsl-rl itself saves DIR/checkpoints/model_<it>.pt
every --save-interval iterations and at the end (rank 0) and logs to TensorBoard there.

It installs no signal handler: under hpctrain, the bootstrap's rsl_rl hooks save a checkpoint at
the next iteration after SIGTERM or the preemption signal and let learn() return, and on the
next run hpctrain passes that checkpoint as --checkpoint (hpctrain/rank/during/train_hooks.py). A run
resumed by hpctrain trains up to --updates in all; run by hand, learn() runs --updates more, as
rsl-rl does.

Run with hpctrain (job.yaml):
    library: rsl_rl
    script: examples/rl/rsl_rl_pendulum.py
    args: [--updates, "20"]
Plain torchrun, one node, 2 processes (on a GPU machine; on CPU rsl-rl needs hpctrain's CPU shims,
see hpctrain/rank/before/cpu_shims.py):
    torchrun --standalone --nproc-per-node=2 examples/rl/rsl_rl_pendulum.py --updates 5 --out /tmp/rsl
Resume (rsl-rl's own load: weights, optimizer, iteration):
    torchrun ... examples/rl/rsl_rl_pendulum.py --checkpoint /tmp/rsl/checkpoints/model_4.pt --updates 5

Outputs: DIR/checkpoints/model_<it>.pt (rank 0, rsl-rl's own saves; "iter" inside = it, the
iteration the file was saved at, where a resumed run starts again), the agent's config in
DIR/checkpoints/params/agent.yaml (where Isaac Lab's train.py saves it; `hpctrain export` reads it), DIR/results/rank-<RANK>.json
on every rank (sha256 of the actor+critic weights before the first update and at the end,
rsl-rl's value loss of the first and the last update) and DIR/results/attempts.jsonl, one line
per rank and run (iteration started from, SLURM_RESTART_COUNT, iteration reached).
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
import yaml
from rsl_rl.algorithms import PPO
from rsl_rl.env import VecEnv
from rsl_rl.runners import OnPolicyRunner
from tensordict import TensorDict


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("HPCTRAIN_RUN_DIR", "./out"), help="output directory")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--updates", type=int, default=5, help="PPO iterations: runner.learn()'s count")
    p.add_argument("--checkpoint", default=None, help="resume from this checkpoint")
    p.add_argument("--save-interval", type=int, default=50,
                   help="rsl-rl's save_interval: it saves every N iterations and at the end")
    p.add_argument("--sleep", type=float, default=0.0,
                   help="seconds to sleep after each update (lets a test preempt it mid-run)")
    p.add_argument("--num-envs", type=int, default=32, help="environments per rank")
    p.add_argument("--steps", type=int, default=32, help="steps per environment per update")
    p.add_argument("--entropy-coef", type=float, default=0.01,
                   help="PPO's entropy coefficient: taken from here at every start, a resumed one "
                        "included (runner.load() restores weights and optimizer, not this)")
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


class RecordingPPO(PPO):
    """rsl-rl's PPO, keeping two things for the result file: the weights before the first update
    (learn() has broadcast rank 0's by then) and each update's mean value loss, the "value" entry
    of the loss dict that rsl-rl's logger writes as Loss/value (rank 0 only: each rank keeps its own).
    It also sleeps SLEEP seconds after each update (--sleep)."""

    SLEEP = 0.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.initial_digest, self.value_losses = None, []

    def update(self) -> dict[str, float]:
        if self.initial_digest is None:
            self.initial_digest = params_digest(self._raw_actor, self._raw_critic)
        loss_dict = super().update()
        self.value_losses.append(loss_dict["value"])
        time.sleep(self.SLEEP)
        return loss_dict


def train_cfg(steps: int, save_interval: int, entropy_coef: float = 0.01) -> dict:
    mlp = {"class_name": "MLPModel", "hidden_dims": [64, 64], "activation": "elu", "obs_normalization": False}
    return {
        "num_steps_per_env": steps,
        "save_interval": save_interval,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "actor": {**mlp, "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
        "critic": dict(mlp),
        "algorithm": {"class_name": RecordingPPO, "learning_rate": 1e-3, "num_learning_epochs": 4,
                      "num_mini_batches": 4, "schedule": "adaptive", "desired_kl": 0.01,
                      "entropy_coef": entropy_coef},
        "logger": "tensorboard",
    }


def save_config(log_dir: str, cfg: dict) -> None:
    """DIR/checkpoints/params/agent.yaml, as Isaac Lab's train.py saves it: what the actor is
    (hpctrain export rebuilds the policy from it and the checkpoint)."""
    os.makedirs(os.path.join(log_dir, "params"), exist_ok=True)
    algorithm = {**cfg["algorithm"], "class_name": cfg["algorithm"]["class_name"].__name__}
    with open(os.path.join(log_dir, "params", "agent.yaml"), "w") as f:
        yaml.safe_dump({**cfg, "algorithm": algorithm}, f)


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

    RecordingPPO.SLEEP = args.sleep
    log_dir = os.path.join(args.out, "checkpoints")
    cfg = train_cfg(args.steps, args.save_interval, args.entropy_coef)
    runner = OnPolicyRunner(env, cfg, log_dir=log_dir,
                            device=device)  # creates the process group
    if rank == 0:  # the agent's config beside the checkpoints, where Isaac Lab's train saves it
        save_config(log_dir, cfg)
    resumed_from = 0
    if args.checkpoint:
        runner.load(args.checkpoint, map_location=device)  # every rank loads the same file
        resumed_from = runner.current_learning_iteration
    attempt = {"rank": rank, "world_size": world, "started_from": resumed_from,
               "resume_from": args.checkpoint, "entropy_coef": runner.alg.entropy_coef,
               "job_restart": int(os.environ.get("SLURM_RESTART_COUNT", 0)),
               "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname()}
    print(f"[rank {rank}] starting at iteration {resumed_from}", flush=True)
    t0 = time.time()
    runner.learn(num_learning_iterations=args.updates)
    wall = time.time() - t0
    reached = runner.current_learning_iteration  # the index of the last iteration run

    losses = runner.alg.value_losses  # none when a resumed run had no iteration left to do
    ckpt = os.path.join(log_dir, f"model_{reached}.pt") if rank == 0 else None
    result = {
        "library": "rsl_rl", "rank": rank, "world_size": world, "local_rank": local_rank,
        "hostname": socket.gethostname(), "updates": args.updates, "resumed_from": resumed_from,
        "iteration": reached,
        "initial_params_sha256": runner.alg.initial_digest,
        "params_sha256": params_digest(runner.alg._raw_actor, runner.alg._raw_critic),
        "loss": "value loss (rsl-rl PPO.update()['value'])",
        "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
        "checkpoint": ckpt if ckpt and os.path.exists(ckpt) else None, "train_wall_s": round(wall, 3),
    }
    attempt.update(reached=reached, params_sha256=result["params_sha256"])
    os.makedirs(os.path.join(args.out, "results"), exist_ok=True)
    with open(os.path.join(args.out, "results", "attempts.jsonl"), "a") as f:
        f.write(json.dumps(attempt) + "\n")
    with open(os.path.join(args.out, "results", f"rank-{rank}.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(f"[rank {rank}] done at iteration {reached}: {json.dumps(result)}", flush=True)


if __name__ == "__main__":
    main()

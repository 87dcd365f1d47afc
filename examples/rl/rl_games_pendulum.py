"""Tiny distributed PPO with rl-games (1.6.x) on gymnasium Pendulum-v1.

rl-games goes distributed when the agent config says `multi_gpu: True` (this script sets it when
WORLD_SIZE > 1, as Isaac Lab's `--distributed` does): it then creates the process group itself,
broadcasts rank 0's weights, all-reduces gradients and saves checkpoints on rank 0 only. Like
Isaac Lab's rl_games train.py it hands a config to rl-games' Runner and calls runner.run() once:
rl-games trains up to max_epochs (--updates, an absolute epoch: a resumed run continues to it)
and saves every --save-interval epochs and at the end itself.

It installs no signal handler: under hpctrain, the bootstrap's rl_games hook ends the training at
the next epoch after SIGTERM or the preemption signal through rl-games' own end of training
(rank 0 saves that epoch's 'last_' checkpoint), and on the next run hpctrain passes it as
--checkpoint (hpctrain/rank/during/train_hooks.py).

Run with hpctrain (job.yaml):
    library: rl_games
    script: examples/rl/rl_games_pendulum.py
    args: [--updates, "20"]
Plain torchrun, one node, 2 processes (on a GPU machine; on CPU rl-games needs hpctrain's CPU
shims, see hpctrain/rank/before/cpu_shims.py):
    torchrun --standalone --nproc-per-node=2 examples/rl/rl_games_pendulum.py --updates 5 --out /tmp/rlg
Resume (rl-games' own restore: weights, optimizer, epoch and frame counters), to epoch 10:
    torchrun ... examples/rl/rl_games_pendulum.py --checkpoint /tmp/rlg/checkpoints/nn/last_pendulum_ep_5_rew_<R>.pth --updates 10

Outputs: DIR/checkpoints/nn/last_pendulum_ep_<epoch>_rew_<reward>.pth (rank 0, rl-games' own
save; "epoch" inside), the agent's config in DIR/checkpoints/params/agent.yaml (where Isaac
Lab's train.py saves it; `hpctrain export` reads it), DIR/results/rank-<RANK>.json on every rank: sha256 of the weights as
the first epoch starts and at the end, and rl-games' critic loss of the first and the last
epoch; and DIR/results/attempts.jsonl, one line per rank and run (epoch started from, reached).
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
from rl_games.algos_torch import torch_ext
from rl_games.algos_torch.a2c_continuous import A2CAgent
from rl_games.common import env_configurations, vecenv
from rl_games.common.algo_observer import DefaultAlgoObserver
from rl_games.common.ivecenv import IVecEnv
from rl_games.torch_runner import Runner


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("HPCTRAIN_RUN_DIR", "./out"), help="output directory")
    p.add_argument("--seed", type=int, default=42, help="base seed (rl-games adds RANK; 0 means unseeded)")
    p.add_argument("--updates", type=int, default=5, help="max_epochs: the epoch training ends at")
    p.add_argument("--checkpoint", default=None, help="resume from this checkpoint")
    p.add_argument("--save-interval", type=int, default=0,
                   help="rl-games' save_frequency: a 'last_' checkpoint every N epochs (0: at the end)")
    p.add_argument("--sleep", type=float, default=0.0,
                   help="seconds to sleep after each epoch (lets a test preempt it mid-run)")
    p.add_argument("--num-envs", type=int, default=32, help="environments per rank")
    p.add_argument("--steps", type=int, default=32, help="steps per environment per update")
    return p.parse_args()


class PendulumVecEnv(IVecEnv):
    """gymnasium's vectorised Pendulum-v1 behind rl-games' IVecEnv interface (numpy in/out)."""

    def __init__(self, num_envs: int, seed: int):
        self.envs = gym.make_vec(
            "Pendulum-v1", num_envs=num_envs, vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        )
        self.seed_value = seed

    def step(self, actions):
        act = actions.cpu().numpy() if torch.is_tensor(actions) else np.asarray(actions)
        obs, rew, term, trunc, _ = self.envs.step(act.astype(np.float32))
        # rl-games bootstraps the value on time-outs when value_bootstrap is on
        return obs, rew.astype(np.float32), term | trunc, {"time_outs": trunc.astype(np.float32)}

    def reset(self):
        obs, _ = self.envs.reset(seed=self.seed_value)
        return obs

    def get_env_info(self):
        return {"observation_space": self.envs.single_observation_space,
                "action_space": self.envs.single_action_space, "agents": 1, "value_size": 1}


def agent_config(args, rank: int, world: int, device: str, max_epochs: int) -> dict:
    batch = args.num_envs * args.steps
    return {"params": {
        "seed": args.seed,
        "algo": {"name": "a2c_continuous"},
        "model": {"name": "continuous_a2c_logstd"},
        "network": {
            "name": "actor_critic", "separate": False,
            "space": {"continuous": {"mu_activation": "None", "sigma_activation": "None",
                                     "mu_init": {"name": "default"},
                                     "sigma_init": {"name": "const_initializer", "val": 0},
                                     "fixed_sigma": True}},
            "mlp": {"units": [64, 64], "activation": "elu", "initializer": {"name": "default"}},
        },
        "config": {
            "name": "pendulum", "env_name": "hpctrain_pendulum", "env_config": {},
            "multi_gpu": world > 1, "device": device, "device_name": device,
            "torch_compile": False,  # compiling costs ~40 s on CPU for no gain at this size
            "ppo": True, "mixed_precision": False, "normalize_input": False, "normalize_value": False,
            "value_bootstrap": True, "num_actors": args.num_envs, "reward_shaper": {"scale_value": 0.1},
            "normalize_advantage": True, "gamma": 0.99, "tau": 0.95, "learning_rate": 3e-4,
            "lr_schedule": "adaptive", "schedule_type": "legacy", "kl_threshold": 0.008,
            "max_epochs": max_epochs, "save_frequency": args.save_interval, "grad_norm": 1.0,
            "entropy_coef": 0.0,
            "truncate_grads": True, "e_clip": 0.2, "clip_value": True, "horizon_length": args.steps,
            "minibatch_size": batch // 4, "mini_epochs": 4, "critic_coef": 2, "bounds_loss_coef": 1e-4,
            "train_dir": args.out, "full_experiment_name": "checkpoints",  # -> DIR/checkpoints/nn/
        },
    }}


def params_digest(module) -> str:
    h = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class RecordingA2CAgent(A2CAgent):
    """rl-games' continuous PPO agent, keeping two things for the result file: the weights as the
    first epoch starts (train() has broadcast rank 0's by then; the constructor's are per-rank
    random) and each epoch's mean critic loss, the value rl-games logs as losses/c_loss (on rank 0
    only: every rank keeps its own here). It also sleeps SLEEP seconds after each epoch (--sleep)."""

    SLEEP = 0.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.initial_digest, self.critic_losses = None, []

    def train_epoch(self):
        if self.initial_digest is None:
            self.initial_digest = params_digest(self.model)
        stats = super().train_epoch()  # (..., a_losses, c_losses, ...): one entry per mini-batch
        self.critic_losses.append(torch_ext.mean_list(stats[5]).item())
        time.sleep(self.SLEEP)
        return stats


def main():
    args = parse_args()
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"

    # rl-games finds environments by name: register a vec-env type and an env using it.
    vecenv.register("HPCTRAIN_GYM_VEC",
                    lambda config_name, num_actors, **kw: PendulumVecEnv(num_actors, seed=kw.get("seed", 0)))
    env_configurations.register("hpctrain_pendulum", {"vecenv_type": "HPCTRAIN_GYM_VEC",
                                                      "env_creator": lambda **kw: None})

    # For the result file only: the epoch the checkpoint holds (rl-games restores it itself).
    resumed_from = 0
    if args.checkpoint:
        resumed_from = int(torch.load(args.checkpoint, map_location="cpu", weights_only=False)["epoch"])

    observer = DefaultAlgoObserver()  # keeps a reference to the agent (after_init)
    runner = Runner(observer)
    RecordingA2CAgent.SLEEP = args.sleep
    runner.algo_factory.register_builder("a2c_continuous", lambda **kw: RecordingA2CAgent(**kw))
    config = agent_config(args, rank, world, device, max_epochs=args.updates)
    if rank == 0:  # the agent's config beside the checkpoints, where Isaac Lab's train saves it
        params = os.path.join(args.out, "checkpoints", "params")
        os.makedirs(params, exist_ok=True)
        with open(os.path.join(params, "agent.yaml"), "w") as f:
            yaml.safe_dump(config, f)
    runner.load(config)
    runner.reset()
    attempt = {"rank": rank, "world_size": world, "started_from": resumed_from,
               "resume_from": args.checkpoint,
               "job_restart": int(os.environ.get("SLURM_RESTART_COUNT", 0)),
               "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname()}
    t0 = time.time()
    runner.run({"train": True, "play": False, "checkpoint": args.checkpoint})
    wall = time.time() - t0
    agent = observer.algo

    ckpt = None
    if rank == 0:
        saved = sorted(f for f in os.listdir(agent.nn_dir) if f.startswith(f"last_pendulum_ep_{agent.epoch_num}_"))
        ckpt = os.path.join(agent.nn_dir, saved[-1]) if saved else None
    result = {
        "library": "rl_games", "rank": rank, "world_size": world, "local_rank": local_rank,
        "hostname": socket.gethostname(), "updates": agent.epoch_num - resumed_from,
        "resumed_from": resumed_from, "iteration": agent.epoch_num,
        "initial_params_sha256": agent.initial_digest, "params_sha256": params_digest(agent.model),
        "loss": "critic loss (rl-games losses/c_loss)",
        "first_loss": agent.critic_losses[0] if agent.critic_losses else None,
        "last_loss": agent.critic_losses[-1] if agent.critic_losses else None,
        "checkpoint": ckpt, "train_wall_s": round(wall, 3),
    }
    attempt.update(reached=agent.epoch_num, params_sha256=result["params_sha256"])
    os.makedirs(os.path.join(args.out, "results"), exist_ok=True)
    with open(os.path.join(args.out, "results", "attempts.jsonl"), "a") as f:
        f.write(json.dumps(attempt) + "\n")
    with open(os.path.join(args.out, "results", f"rank-{rank}.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(f"[rank {rank}] done: {json.dumps(result)}")


if __name__ == "__main__":
    main()

"""Tiny distributed PPO with skrl (2.x, JAX + Flax) on gymnasium Pendulum-v1.

skrl's JAX mode is distributed when JAX_WORLD_SIZE > 1: at `import skrl` it calls
jax.distributed.initialize from JAX_COORDINATOR_ADDR/_PORT, JAX_WORLD_SIZE, JAX_RANK and
JAX_LOCAL_RANK; its agents broadcast rank 0's parameters and all-reduce gradients (pmap/psum).
torchrun does not set these variables: use skrl's launcher, or set them per process. Like Isaac
Lab's skrl train.py (--ml_framework jax) it loads --checkpoint with agent.load() if given and
calls trainer.train() once; skrl writes DIR/checkpoints/agent_<timestep>.pickle every
--save-interval updates (rank 0). It installs no signal handler: hpctrain's skrl_jax hooks save
and stop after an update on SIGTERM or the preemption signal, and continue a resumed run's
timesteps (hpctrain/rank/during/train_hooks.py).

Run with hpctrain (job.yaml):
    library: skrl_jax
    script: examples/rl/skrl_jax_pendulum.py
    args: [--updates, "5"]
skrl's own launcher, one node, 2 processes (NB: it exits 0 even when a process fails):
    python -m skrl.utils.distributed.jax --nnodes=1 --nproc_per_node=2 \
        examples/rl/skrl_jax_pendulum.py --updates 3 --out /tmp/skrl_jax
By hand (one line per process, RANK = 0 and 1):
    JAX_COORDINATOR_ADDR=127.0.0.1 JAX_COORDINATOR_PORT=5555 JAX_WORLD_SIZE=2 JAX_RANK=$RANK \
        JAX_LOCAL_RANK=$RANK python examples/rl/skrl_jax_pendulum.py --out /tmp/skrl_jax &
On CPU this needs hpctrain's skrl_jax shim (imports jax.experimental.multihost_utils).
Resume: --checkpoint DIR/checkpoints/agent_<timestep>.pickle (skrl's JAX checkpoints hold only
parameters; the timestep in the name says where it was saved).

Outputs: DIR/checkpoints/agent_<timestep>.pickle (rank 0, skrl's own checkpoints),
DIR/results/rank-<JAX_RANK>.json on every rank: sha256 of the policy+value parameters before the
first update and at the end, skrl's value loss of the first and the last update; and
DIR/results/attempts.jsonl, one line per rank and run (update started from, reached).
"""

import argparse
import glob
import hashlib
import json
import os
import re
import socket
import time

import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

# NOTE: importing skrl calls jax.distributed.initialize when JAX_WORLD_SIZE > 1.
from skrl import config as skrl_config
from skrl.agents.jax.ppo import PPO, PPO_CFG
from skrl.envs.wrappers.jax import wrap_env
from skrl.memories.jax import RandomMemory
from skrl.models.jax import DeterministicMixin, GaussianMixin, Model
from skrl.trainers.jax import SequentialTrainer
from skrl.utils import set_seed

skrl_config.jax.backend = "jax"  # arrays stay jax.Array (the alternative is "numpy")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("HPCTRAIN_RUN_DIR", "./out"), help="output directory")
    p.add_argument("--seed", type=int, default=42, help="base seed (skrl adds the rank)")
    p.add_argument("--updates", type=int, default=3, help="PPO updates: the trainer's timesteps / --steps")
    p.add_argument("--checkpoint", default=None, help="resume from this checkpoint")
    p.add_argument("--save-interval", type=int, default=0,
                   help="skrl's checkpoint_interval, in updates (0: once, at the end)")
    p.add_argument("--sleep", type=float, default=0.0,
                   help="seconds to sleep after each update (lets a test preempt it mid-run)")
    p.add_argument("--num-envs", type=int, default=16, help="environments per rank")
    p.add_argument("--steps", type=int, default=16, help="steps per environment per update")
    return p.parse_args()


class Policy(GaussianMixin, Model):
    def __init__(self, observation_space, action_space, device=None, **kwargs):
        Model.__init__(self, observation_space=observation_space, action_space=action_space,
                       device=device, **kwargs)
        GaussianMixin.__init__(self, clip_actions=True)

    @nn.compact
    def __call__(self, inputs, role=""):
        x = nn.elu(nn.Dense(64)(inputs["observations"]))
        x = nn.elu(nn.Dense(64)(x))
        log_std = self.param("log_std", lambda _: jnp.zeros(self.num_actions))
        return 2.0 * nn.tanh(nn.Dense(self.num_actions)(x)), {"log_std": log_std}


class Value(DeterministicMixin, Model):
    def __init__(self, observation_space, action_space, device=None, **kwargs):
        Model.__init__(self, observation_space=observation_space, action_space=action_space,
                       device=device, **kwargs)
        DeterministicMixin.__init__(self)

    @nn.compact
    def __call__(self, inputs, role=""):
        x = nn.elu(nn.Dense(64)(inputs["observations"]))
        x = nn.elu(nn.Dense(64)(x))
        return nn.Dense(1)(x), {}


class RecordingPPO(PPO):
    """skrl's PPO; sleeps SLEEP seconds after each update (--sleep)."""

    SLEEP = 0.0

    def update(self, *, timestep: int, timesteps: int) -> None:
        super().update(timestep=timestep, timesteps=timesteps)
        time.sleep(self.SLEEP)


def params_digest(*models) -> str:
    h = hashlib.sha256()
    for model in models:
        for path, leaf in jax.tree_util.tree_flatten_with_path(model.state_dict.params)[0]:
            h.update(jax.tree_util.keystr(path).encode())
            h.update(np.asarray(leaf).tobytes())
    return h.hexdigest()


def main():
    args = parse_args()
    rank, world = skrl_config.jax.rank, skrl_config.jax.world_size  # from JAX_RANK / JAX_WORLD_SIZE
    set_seed(args.seed)  # skrl adds the rank in distributed runs

    envs = gym.make_vec("Pendulum-v1", num_envs=args.num_envs, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    envs.reset(seed=args.seed + rank)
    env = wrap_env(envs, wrapper="gymnasium", verbose=False)
    device = env.device  # in distributed runs: the device local to this process

    models = {"policy": Policy(env.observation_space, env.action_space, device),
              "value": Value(env.observation_space, env.action_space, device)}
    for role, model in models.items():
        model.init_state_dict(role=role)
    cfg = PPO_CFG(rollouts=args.steps, learning_epochs=2, mini_batches=2, learning_rate=3e-4,
                  discount_factor=0.99, gae_lambda=0.95, grad_norm_clip=1.0, value_loss_scale=1.0,
                  time_limit_bootstrap=True, rewards_shaper=lambda r, *a, **k: r * 0.1)
    # No TensorBoard (we save explicitly below). Then skrl never flushes (and clears) the statistics
    # it tracks for it either: agent.tracking_data["Loss / Value loss"] keeps one value per update.
    cfg.experiment.write_interval = 0
    # skrl's own checkpoints, DIR/checkpoints/agent_<timestep>.pickle: the experiment directory is DIR.
    cfg.experiment.directory, cfg.experiment.experiment_name = os.path.split(os.path.abspath(args.out))
    cfg.experiment.checkpoint_interval = (args.save_interval or args.updates) * args.steps
    memory = RandomMemory(memory_size=args.steps, num_envs=env.num_envs, device=device)
    RecordingPPO.SLEEP = args.sleep
    agent = RecordingPPO(models=models, memory=memory, observation_space=env.observation_space,
                         action_space=env.action_space, device=device, cfg=cfg)

    resumed_from = 0
    if args.checkpoint:
        agent.load(args.checkpoint)  # every rank loads the same file
        resumed_from = int(re.search(r"agent_(\d+)", os.path.basename(args.checkpoint)).group(1)) // args.steps
    attempt = {"rank": rank, "world_size": world, "started_from": resumed_from,
               "resume_from": args.checkpoint,
               "job_restart": int(os.environ.get("SLURM_RESTART_COUNT", 0)),
               "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname()}

    # The agent's constructor broadcast rank 0's parameters (each rank built its own from its
    # own seed) and a resume loaded the same file on every rank: these are the weights that train.
    initial_digest = params_digest(agent.policy, agent.value)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={
        "timesteps": args.updates * args.steps, "headless": True, "disable_progressbar": True,
        "close_environment_at_exit": False})
    t0 = time.time()
    trainer.train()
    wall = time.time() - t0

    losses = agent.tracking_data["Loss / Value loss"]  # this run's updates
    reached = resumed_from + len(losses)
    saved = sorted(glob.glob(os.path.join(args.out, "checkpoints", "agent_*.pickle")), key=os.path.getmtime)
    result = {
        "library": "skrl_jax", "rank": rank, "world_size": world, "local_rank": skrl_config.jax.local_rank,
        "hostname": socket.gethostname(), "updates": args.updates, "resumed_from": resumed_from,
        "iteration": reached,
        "initial_params_sha256": initial_digest, "params_sha256": params_digest(agent.policy, agent.value),
        "loss": "value loss (skrl tracking_data['Loss / Value loss'])",
        "first_loss": float(losses[0]) if losses else None,
        "last_loss": float(losses[-1]) if losses else None,
        "checkpoint": saved[-1] if rank == 0 and saved else None, "train_wall_s": round(wall, 3),
    }
    attempt.update(reached=reached, params_sha256=result["params_sha256"])
    os.makedirs(os.path.join(args.out, "results"), exist_ok=True)
    with open(os.path.join(args.out, "results", "attempts.jsonl"), "a") as f:
        f.write(json.dumps(attempt) + "\n")
    with open(os.path.join(args.out, "results", f"rank-{rank}.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(f"[rank {rank}] done at update {reached}: {json.dumps(result)}")
    env.close()


if __name__ == "__main__":
    main()

"""Tiny distributed PPO with skrl (2.x, PyTorch) on gymnasium Pendulum-v1.

skrl decides at `import skrl` whether the run is distributed (WORLD_SIZE > 1, set by torchrun) and
then creates the process group itself; its agents broadcast rank 0's weights at init and
all-reduce gradients at every update. This script builds a vectorised Pendulum, a PPO agent and a
SequentialTrainer, saves checkpoints on rank 0 and writes one result file per rank.

It survives preemption through the agent's own per-step hook, post_interaction(): after each PPO
update the ranks agree (all_reduce of a flag set by the handler of $HPCTRAIN_PREEMPT_SIGNAL)
whether to stop; rank 0 then saves with skrl's agent.save() and every rank leaves the trainer at
that same update and exits 0, for hpctrain to requeue the job. Rank 0 also saves every
--save-interval updates. --updates is a total: a resumed run (--checkpoint, passed by hpctrain)
continues from the saved update up to it.

Run with hpctrain (job.yaml):
    library: skrl
    script: examples/rl/skrl_torch_pendulum.py
    args: [--updates, "20"]
Plain torchrun, one node, 2 processes (on a GPU machine; on CPU skrl needs hpctrain's CPU shims,
installed before `import skrl`, see hpctrain/rank/cpu_shims.py):
    torchrun --standalone --nproc-per-node=2 examples/rl/skrl_torch_pendulum.py --updates 5 --out /tmp/skrl
Resume (skrl's agent.load: models, optimizer, preprocessors and our update counter), to 10 in all:
    torchrun ... examples/rl/skrl_torch_pendulum.py --checkpoint /tmp/skrl/checkpoints/agent_160.pt --updates 10

Outputs: DIR/checkpoints/agent_<timestep>.pt (rank 0, skrl's agent.save) and
DIR/results/rank-<RANK>.json on every rank (sha256 of the policy+value weights before the first
update and at the end, skrl's value loss of the first and the last update),
DIR/results/attempts.jsonl (one line per rank and run: update started from, SLURM_RESTART_COUNT,
update reached, why it stopped).
"""

import argparse
import hashlib
import json
import os
import signal
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
    p.add_argument("--updates", type=int, default=5,
                   help="PPO updates in all (a resumed run continues up to this)")
    p.add_argument("--save-interval", type=int, default=0,
                   help="checkpoint every N updates (0: only at the end)")
    p.add_argument("--sleep", type=float, default=0.0,
                   help="seconds to sleep after each update (lets a test preempt it mid-run)")
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


STOP = {"flag": False}


class Preempted(Exception):
    """Leaves skrl's trainer loop at an update boundary that every rank agreed on."""


class ResumablePPO(PPO):
    """PPO plus a check after every update: count it, save periodically, stop on the signal."""

    def setup_resumable(self, progress, save, save_interval: int, sleep: float, updates: int):
        self._progress, self._save, self._save_interval = progress, save, save_interval
        self._sleep, self._updates = sleep, updates

    def post_interaction(self, *, timestep: int, timesteps: int) -> None:
        super().post_interaction(timestep=timestep, timesteps=timesteps)
        if self._rollout % self.cfg.rollouts:
            return  # mid-rollout: no update happened, nothing to save that could be resumed
        self._progress.updates += 1
        time.sleep(self._sleep)
        flag = torch.tensor([1.0 if STOP["flag"] else 0.0], device=self.device)
        if skrl_config.torch.is_distributed:
            # One decision for all ranks: the signal reaches each process at a slightly different
            # moment, and a rank that left alone would leave the others blocked in the next update.
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        if flag.item() > 0:
            raise Preempted()
        done = self._progress.updates
        if self._save_interval and done % self._save_interval == 0 and done < self._updates:
            self._save()


def params_digest(*modules) -> str:
    h = hashlib.sha256()
    for module in modules:
        for name, tensor in module.state_dict().items():
            h.update(name.encode())
            h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def main():
    args = parse_args()
    # torchrun's agent and the ranks start with the preemption signal ignored (hpctrain): install
    # a handler that only sets a flag; the agent's hook stops at the next update.
    sig = getattr(signal, os.environ.get("HPCTRAIN_PREEMPT_SIGNAL", "SIGUSR2"))
    signal.signal(sig, lambda *_: STOP.update(flag=True))
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
    # No TensorBoard. Then skrl never flushes (and clears) the statistics it tracks for it either:
    # agent.tracking_data["Loss / Value loss"] keeps one value per update, read at the end.
    cfg.experiment.write_interval = 0
    # skrl's own interval names files by the timestep of this run, which restarts at 0 after a
    # resume: the hook saves at --save-interval instead, named by the total.
    cfg.experiment.checkpoint_interval = 0
    memory = RandomMemory(memory_size=args.steps, num_envs=env.num_envs, device=device)
    agent = ResumablePPO(models=models, memory=memory, observation_space=env.observation_space,
                         action_space=env.action_space, device=device, cfg=cfg)
    progress = Progress()
    agent.checkpoint_modules["progress"] = progress

    if args.checkpoint:
        agent.load(args.checkpoint)  # every rank loads the same file
    resumed_from = progress.updates

    def save() -> str | None:
        if rank != 0:
            return None
        os.makedirs(os.path.join(args.out, "checkpoints"), exist_ok=True)
        path = os.path.join(args.out, "checkpoints", f"agent_{progress.updates * args.steps}.pt")
        # skrl's own save, to a temporary name first: hpctrain's resume skips *.tmp, so a run
        # killed mid-write never resumes from a half-written file.
        agent.save(path + ".tmp")
        os.replace(path + ".tmp", path)
        print(f"[rank 0] saved {path}", flush=True)
        return path

    agent.setup_resumable(progress, save, args.save_interval, args.sleep, args.updates)
    attempt = {"rank": rank, "world_size": world, "started_from": resumed_from,
               "resume_from": args.checkpoint,
               "job_restart": int(os.environ.get("SLURM_RESTART_COUNT", 0)),
               "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname()}
    print(f"[rank {rank}] starting at update {resumed_from}", flush=True)
    # The agent's constructor broadcast rank 0's parameters (each rank built its own from its
    # own seed) and a resume loaded the same file on every rank: these are the weights that train.
    initial_digest = params_digest(agent.policy, agent.value)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={
        "timesteps": max(args.updates - resumed_from, 0) * args.steps, "headless": True,
        "disable_progressbar": True, "close_environment_at_exit": False})
    t0 = time.time()
    stopped = "completed"
    try:
        trainer.train()
    except Preempted:
        stopped = "preempted"
    wall = time.time() - t0
    ckpt = save()

    losses = agent.tracking_data["Loss / Value loss"]  # this run's updates (none if nothing was left)
    result = {
        "library": "skrl", "rank": rank, "world_size": world, "local_rank": local_rank,
        "hostname": socket.gethostname(), "updates": args.updates, "resumed_from": resumed_from,
        "iteration": progress.updates, "stopped": stopped,
        "initial_params_sha256": initial_digest, "params_sha256": params_digest(agent.policy, agent.value),
        "loss": "value loss (skrl tracking_data['Loss / Value loss'])",
        "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
        "checkpoint": ckpt, "train_wall_s": round(wall, 3),
    }
    attempt.update(reached=progress.updates, stopped=stopped, params_sha256=result["params_sha256"])
    os.makedirs(os.path.join(args.out, "results"), exist_ok=True)
    with open(os.path.join(args.out, "results", "attempts.jsonl"), "a") as f:
        f.write(json.dumps(attempt) + "\n")
    with open(os.path.join(args.out, "results", f"rank-{rank}.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(f"[rank {rank}] {stopped} at update {progress.updates}: {json.dumps(result)}", flush=True)
    env.close()


if __name__ == "__main__":
    main()

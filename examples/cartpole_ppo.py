"""PPO on CartPole-v1 with plain PyTorch DDP and hpctrain's DDPContext: the first example.

Every rank collects its own episodes (its own seed: HPCTRAIN_SEED = seed + global rank), DDP
averages the gradients, so all ranks hold the same policy. Rank 0 saves the checkpoint; every rank
writes results/rank-R.json (weights digest before the first update and at the end, value loss and
mean episode return of the first and the last update). Each update is reported to hpctrain
(`hpctrain status`, `submit --wait`) and rank 0 logs it for TensorBoard into RUN_DIR/tensorboard/
(`hpctrain plot`, `hpctrain tensorboard`).

    hpctrain submit examples/cartpole_ppo.yaml                       # this machine, 2 ranks
    hpctrain submit examples/cartpole_ppo.yaml --site localcluster --set resources.nodes=2
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
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from hpctrain.rank.ddp import DDPContext

try:  # under hpctrain's bootstrap: the run's progress report (status/progress-R.json)
    from hpctrain_progress import report
except ImportError:  # run by hand
    def report(step, **metrics):
        pass


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("HPCTRAIN_RUN_DIR", "./out"))
    p.add_argument("--updates", type=int, default=8)
    p.add_argument("--num-envs", type=int, default=4, help="environments per rank")
    p.add_argument("--steps", type=int, default=128, help="steps per environment per update")
    p.add_argument("--lr", type=float, default=2.5e-3, help="Adam's learning rate")
    p.add_argument("--entropy", type=float, default=0.01, help="the entropy bonus's weight")
    p.add_argument("--target-return", type=float, default=None,
                   help="stop early once the mean return over all ranks reaches this")
    return p.parse_args()


class ActorCritic(nn.Module):
    def __init__(self, obs: int, actions: int):
        super().__init__()
        self.pi = nn.Sequential(nn.Linear(obs, 64), nn.Tanh(), nn.Linear(64, actions))
        self.v = nn.Sequential(nn.Linear(obs, 64), nn.Tanh(), nn.Linear(64, 1))

    def forward(self, x):
        return self.pi(x), self.v(x).squeeze(-1)


def digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def tensorboard(directory: str):
    """Rank 0's TensorBoard writer (None without the tensorboard package)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(os.path.join(directory, "tensorboard"))


def main():
    args = parse_args()
    seed = int(os.environ.get("HPCTRAIN_SEED", "0"))
    torch.manual_seed(int(os.environ.get("HPCTRAIN_BASE_SEED", seed)))  # same initial weights
    with DDPContext() as ctx:
        envs = gym.make_vec("CartPole-v1", num_envs=args.num_envs, vectorization_mode="sync")
        obs, _ = envs.reset(seed=seed)
        net = ActorCritic(envs.single_observation_space.shape[0], envs.single_action_space.n).to(ctx.device)
        model = DDP(net) if ctx.distributed else net  # DDP broadcasts rank 0's weights
        initial_digest = digest(net)  # the weights every rank starts training from
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
        ep_ret = np.zeros(args.num_envs)
        finished: list[float] = []
        value_losses, returns = [], []  # per update: this rank's mean value loss, the all-rank mean return
        mean_return, t0, update = 0.0, time.time(), 0
        writer = tensorboard(args.out) if ctx.is_main else None
        for update in range(1, args.updates + 1):
            buf = {k: [] for k in ("obs", "act", "logp", "rew", "done", "val")}
            for _ in range(args.steps):
                x = torch.as_tensor(obs, dtype=torch.float32, device=ctx.device)
                with torch.no_grad():
                    logits, value = net(x)
                    dist = torch.distributions.Categorical(logits=logits)
                    act = dist.sample()
                obs, rew, term, trunc, _ = envs.step(act.cpu().numpy())
                done = term | trunc
                ep_ret += rew
                finished += ep_ret[done].tolist()
                ep_ret[done] = 0
                for k, v in (("obs", x), ("act", act), ("logp", dist.log_prob(act)), ("val", value),
                             ("rew", torch.as_tensor(rew, dtype=torch.float32)),
                             ("done", torch.as_tensor(done, dtype=torch.float32))):
                    buf[k].append(v.to(ctx.device))
            with torch.no_grad():
                _, last = net(torch.as_tensor(obs, dtype=torch.float32, device=ctx.device))
            b = {k: torch.stack(v) for k, v in buf.items()}
            adv, gae = torch.zeros_like(b["rew"]), torch.zeros_like(last)
            for t in reversed(range(args.steps)):
                nxt = last if t == args.steps - 1 else b["val"][t + 1]
                delta = b["rew"][t] + 0.99 * nxt * (1 - b["done"][t]) - b["val"][t]
                gae = delta + 0.99 * 0.95 * (1 - b["done"][t]) * gae
                adv[t] = gae
            ret = (adv + b["val"]).flatten()
            adv = adv.flatten()
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            o, a, lp = b["obs"].flatten(0, 1), b["act"].flatten(), b["logp"].flatten()
            vl = []
            for _ in range(4):
                for idx in torch.randperm(len(a), device=ctx.device).split(128):
                    logits, v = model(o[idx])
                    d = torch.distributions.Categorical(logits=logits)
                    ratio = (d.log_prob(a[idx]) - lp[idx]).exp()
                    pg = -torch.min(ratio * adv[idx], ratio.clamp(0.8, 1.2) * adv[idx]).mean()
                    value_loss = (v - ret[idx]).pow(2).mean()
                    loss = pg + 0.5 * value_loss - args.entropy * d.entropy().mean()
                    opt.zero_grad()
                    loss.backward()  # DDP averages the gradients over all ranks here
                    opt.step()
                    vl.append(value_loss.item())
            value_losses.append(sum(vl) / len(vl))
            s = ctx.all_sum({"return": sum(finished), "episodes": len(finished)})
            if s["episodes"]:  # a policy that balances past the rollout ends no episode in it
                mean_return = s["return"] / s["episodes"]
            returns.append(mean_return)
            finished = []
            report(update, reward=mean_return, value_loss=value_losses[-1])
            if writer:
                writer.add_scalar("train/mean_return", mean_return, update)
                writer.add_scalar("train/value_loss", value_losses[-1], update)
                writer.flush()
            if ctx.is_main:
                print(f"update {update}: mean return {mean_return:.1f} over {int(s['episodes'])} episodes")
            if ctx.should_stop(args.target_return is not None and mean_return >= args.target_return):
                break
        if writer:
            writer.close()
        checkpoint = None
        if ctx.is_main:
            os.makedirs(os.path.join(args.out, "checkpoints"), exist_ok=True)
            checkpoint = os.path.join(args.out, "checkpoints", f"policy_{update}.pt")
            torch.save({"update": update, "model": net.state_dict()}, checkpoint)
        result = {"rank": ctx.rank, "world_size": ctx.world_size, "backend": ctx.backend,
                  "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
                  "updates": update, "mean_return": mean_return,
                  "initial_params_sha256": initial_digest, "params_sha256": digest(net),
                  "loss": "value loss (mean squared error to the GAE returns)",
                  "first_loss": value_losses[0], "last_loss": value_losses[-1],
                  "first_return": returns[0], "last_return": returns[-1],
                  "checkpoint": checkpoint, "train_wall_s": round(time.time() - t0, 3)}
        os.makedirs(os.path.join(args.out, "results"), exist_ok=True)
        with open(os.path.join(args.out, "results", f"rank-{ctx.rank}.json"), "w") as f:
            json.dump(result, f)
        print(f"rank {ctx.rank}: {json.dumps(result)}")


if __name__ == "__main__":
    main()

"""A tiny plain-torch policy that trains and evaluates, for `hpctrain eval`'s plain contract.

The task: a point at x0 in [-1, 1] moves by the action each step (x += a, 20 steps); the reward
is -|x| per step and an episode succeeds when |x| < 0.05 at its end. The policy is a 1-16-1 MLP
trained to cancel x (loss (x + a)^2), so a later checkpoint scores a higher mean return.

Training (no HPCTRAIN_EVAL_CHECKPOINT): --iterations steps of Adam, a checkpoint
checkpoints/model_<i>.pt every --save-every iterations and at the end, progress reported.
Evaluation (hpctrain eval sets HPCTRAIN_EVAL_CHECKPOINT, _EPISODES, _SEED, _RESULT): the
checkpoint is loaded with weights_only=True, HPCTRAIN_EVAL_EPISODES episodes are played from
seeded starts, and the result JSON is written to $HPCTRAIN_EVAL_RESULT.

    eval_policy.py [--iterations N] [--save-every K]
"""
import argparse
import json
import os

import torch

STEPS = 20


def policy() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(1, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def train(iterations: int, save_every: int) -> None:
    import hpctrain_progress
    torch.manual_seed(int(os.environ.get("HPCTRAIN_SEED", "0")))
    net = policy()
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    out = os.environ["HPCTRAIN_CHECKPOINT_DIR"]
    os.makedirs(out, exist_ok=True)
    for it in range(1, iterations + 1):
        x = torch.rand(256, 1) * 2 - 1
        loss = ((x + net(x)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        hpctrain_progress.report(it, loss=float(loss))
        if it % save_every == 0 or it == iterations:
            tmp = os.path.join(out, f".model_{it}.pt.tmp")
            torch.save({"model": net.state_dict(), "iteration": it}, tmp)
            os.replace(tmp, os.path.join(out, f"model_{it}.pt"))


def evaluate(checkpoint: str, episodes: int, seed: int, result: str) -> None:
    net = policy()
    net.load_state_dict(torch.load(checkpoint, weights_only=True)["model"])
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(episodes, 1, generator=gen) * 2 - 1
    returns = torch.zeros(episodes)
    with torch.no_grad():
        for _ in range(STEPS):
            x = (x + net(x)).clamp(-2, 2)
            returns -= x.abs().squeeze(1)
    with open(result, "w") as f:
        json.dump({"mean_return": float(returns.mean()), "episode_length": STEPS,
                   "success_rate": float((x.abs() < 0.05).float().mean()),
                   "episodes": episodes}, f)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--save-every", type=int, default=10)
    args = p.parse_args()
    if os.environ.get("HPCTRAIN_EVAL_CHECKPOINT"):
        evaluate(os.environ["HPCTRAIN_EVAL_CHECKPOINT"], int(os.environ["HPCTRAIN_EVAL_EPISODES"]),
                 int(os.environ["HPCTRAIN_EVAL_SEED"]), os.environ["HPCTRAIN_EVAL_RESULT"])
    else:
        train(args.iterations, args.save_every)


if __name__ == "__main__":
    main()

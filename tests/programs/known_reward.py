"""A training whose reward is a known function of its parameters, for the tests of studies:
reward(step) = -(log10(lr) + 3)^2 * (1 + 1/step) - (width - 4)^2 / 10 at step 1..--steps, so
the best trial is the one nearest lr = 1e-3, width = 4, and a bad trial is already bad at its
first steps (what the median pruner needs). Every rank reports through hpctrain's progress API
each step and joins one gloo all_reduce (so a multi-node trial is a real process group); rank 0
saves a checkpoint each step into $HPCTRAIN_CHECKPOINT_DIR and a restarted run resumes from
$HPCTRAIN_RESUME_FROM (steps done are not run again: trials/<n>/status/resumed-R.txt says
where it resumed).

    known_reward.py --lr LR [--width W] [--steps N] [--step-time S] [--fail-above LR]
"""
import argparse
import json
import math
import os
import sys
import time

import hpctrain_progress


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--width", type=int, default=4)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--step-time", type=float, default=0.3)
    p.add_argument("--fail-above", type=float, default=None)
    args = p.parse_args()
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    run_dir = os.environ["HPCTRAIN_RUN_DIR"]
    if args.fail_above is not None and args.lr > args.fail_above:
        print(f"rank {rank}: lr {args.lr} diverges", file=sys.stderr)
        return 3
    start = 1
    resume = os.environ.get("HPCTRAIN_RESUME_FROM")
    if resume:
        with open(resume) as f:
            start = json.load(f)["step"] + 1
        with open(os.path.join(run_dir, "status", f"resumed-{rank}.txt"), "w") as f:
            f.write(f"{start}\n")
    ckpt_dir = os.environ.get("HPCTRAIN_CHECKPOINT_DIR", os.path.join(run_dir, "checkpoints"))
    os.makedirs(ckpt_dir, exist_ok=True)
    base = (math.log10(args.lr) + 3) ** 2
    for step in range(start, args.steps + 1):
        reward = -base * (1 + 1 / step) - (args.width - 4) ** 2 / 10
        t = torch.tensor([reward])
        dist.all_reduce(t)  # every rank computes the same: the sum is world_size x reward
        hpctrain_progress.report(step, reward=float(t.item()) / dist.get_world_size())
        if rank == 0:
            tmp = os.path.join(ckpt_dir, ".tmp")
            with open(tmp, "w") as f:
                json.dump({"step": step}, f)
            os.replace(tmp, os.path.join(ckpt_dir, f"step-{step:05d}.json"))
        time.sleep(args.step_time)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A training whose best learning-rate schedule is known, for the tests of population-based
training: each step adds gain(lr, step) = exp(-2 (log10(lr) - target)^2) to a running quality,
target -1.5 (lr ~ 3e-2) in the first half of --steps and -2.5 (lr ~ 3e-3) in the second, so
high early and low late beats every fixed lr. The late best is one explore step (x 0.1) from the
early best: a population of 4 reaches it within a few intervals whatever its draws (a two-step
way down, each step scored about zero, left it to luck). --drop D puts the late best D x below
the early one (--drop 100: two decades, lr ~ 3e-4, a held-out-style landscape that x0.8 / x1.2
perturbation cannot follow within a training: a fresh draw from the space reaches it). It
reports reward = the quality so far, saves {step, quality} into $HPCTRAIN_CHECKPOINT_DIR each
step (write, then rename) and resumes from $HPCTRAIN_RESUME_FROM with whatever --lr it is given
now (status/resumed.txt says where).

    known_schedule.py --lr LR [--steps N] [--step-time S] [--drop D]
                      [--crash-once-in DIR --crash-at STEP]

--crash-once-in/--crash-at: in a run directory whose name is DIR (a member's, e.g. 0001), the
first launch that reaches STEP exits 3 there before saving it, once (status/crashed-at says
the step): the member's crash restart is tested inside the population's own run.
"""
import argparse
import json
import math
import os
import sys
import time


def gain(lr: float, step: int, steps: int, drop: float = 10) -> float:
    target = -1.5 if step <= steps / 2 else -1.5 - math.log10(drop)
    return math.exp(-2 * (math.log10(lr) - target) ** 2)


def fixed(lr: float, steps: int, drop: float = 10) -> float:
    """The final reward of a run that keeps one lr all along."""
    return sum(gain(lr, s, steps, drop) for s in range(1, steps + 1))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--step-time", type=float, default=0.3)
    p.add_argument("--drop", type=float, default=10)
    p.add_argument("--crash-once-in", default="")
    p.add_argument("--crash-at", type=int, default=0)
    args = p.parse_args()
    import hpctrain_progress
    run_dir = os.environ["HPCTRAIN_RUN_DIR"]
    start, quality = 1, 0.0
    resume = os.environ.get("HPCTRAIN_RESUME_FROM")
    if resume:
        with open(resume) as f:
            saved = json.load(f)
        start, quality = saved["step"] + 1, saved["quality"]
        with open(os.path.join(run_dir, "status", "resumed.txt"), "a") as f:
            f.write(f"{start} {args.lr}\n")
    ckpt_dir = os.environ.get("HPCTRAIN_CHECKPOINT_DIR", os.path.join(run_dir, "checkpoints"))
    os.makedirs(ckpt_dir, exist_ok=True)
    for step in range(start, args.steps + 1):
        time.sleep(args.step_time)
        crashed = os.path.join(run_dir, "status", "crashed-at")
        if args.crash_once_in and os.path.basename(os.path.normpath(run_dir)) == args.crash_once_in \
                and step >= args.crash_at and not os.path.exists(crashed):
            with open(crashed, "w") as f:
                f.write(f"{step}\n")
            return 3
        quality += gain(args.lr, step, args.steps, args.drop)
        tmp = os.path.join(ckpt_dir, ".tmp")
        with open(tmp, "w") as f:
            json.dump({"step": step, "quality": quality, "lr": args.lr}, f)
        os.replace(tmp, os.path.join(ckpt_dir, f"step-{step:05d}.json"))
        hpctrain_progress.report(step, reward=quality)
    return 0


if __name__ == "__main__":
    sys.exit(main())

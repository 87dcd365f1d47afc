"""Issue 29's hang: every rank joins the gloo group, then rank --late-rank stalls in its own code
while the others wait for it in an all-reduce; nobody reports progress. Where it stalls
(--when): `before` its first collective (its flight recorder holds no entry at all, issue 50),
`between` its first and second (the default: asleep after collective #1), `busy` after its first,
computing (it holds a CPU, not a sleep). With --first-attempt-only it stalls in the job's first
attempt alone (a requeued one completes)."""
import argparse
import os
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--late-rank", type=int, default=1)
p.add_argument("--sleep", type=float, default=600)
p.add_argument("--when", choices=("before", "between", "busy"), default="between")
p.add_argument("--first-attempt-only", action="store_true")
args = p.parse_args()
dist.init_process_group("gloo")
late = dist.get_rank() == args.late_rank and (
    not args.first_attempt_only or os.environ.get("SLURM_RESTART_COUNT", "0") == "0")
if late and args.when == "before":
    time.sleep(args.sleep)
dist.all_reduce(torch.ones(1))  # every rank's collective #1: the late one lags from #2 on
if late and args.when == "between":
    time.sleep(args.sleep)
if late and args.when == "busy":
    deadline = time.monotonic() + args.sleep
    x = 0
    while time.monotonic() < deadline:
        x += 1
dist.all_reduce(torch.ones(1))
dist.destroy_process_group()

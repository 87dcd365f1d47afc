"""Issue 29's hang: every rank joins the gloo group, then rank --late-rank sleeps (in its own
code) before the all-reduce the others already wait in; nobody reports progress. With
--first-attempt-only it sleeps in the job's first attempt alone (a requeued one completes)."""
import argparse
import os
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--late-rank", type=int, default=1)
p.add_argument("--sleep", type=float, default=600)
p.add_argument("--first-attempt-only", action="store_true")
args = p.parse_args()
dist.init_process_group("gloo")
dist.all_reduce(torch.ones(1))  # every rank's collective #1: the late one lags from #2 on
late = not args.first_attempt_only or os.environ.get("SLURM_RESTART_COUNT", "0") == "0"
if dist.get_rank() == args.late_rank and late:
    time.sleep(args.sleep)
dist.all_reduce(torch.ones(1))
dist.destroy_process_group()

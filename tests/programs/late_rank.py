"""Issue 29's hang: every rank joins the gloo group, then rank --late-rank sleeps (in its own
code) before the all-reduce the others already wait in; nobody reports progress."""
import argparse
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--late-rank", type=int, default=1)
p.add_argument("--sleep", type=float, default=600)
args = p.parse_args()
dist.init_process_group("gloo")
if dist.get_rank() == args.late_rank:
    time.sleep(args.sleep)
dist.all_reduce(torch.ones(1))
dist.destroy_process_group()

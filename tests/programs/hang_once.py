"""A lockstep gloo training loop in which one rank blocks forever in a collective, once per run.

Every iteration: all ranks all-reduce a tensor, report progress (hpctrain_progress), rank 0
saves a checkpoint (the next iteration) every iteration. At --hang-at, after that iteration's
all-reduce, rank --hang-rank calls a receive from a rank that never sends (a communication it
never leaves); the other ranks report the iteration and wait in the next all-reduce. Only the first time in the run directory (a marker file): a restarted
or requeued attempt resumes from the newest checkpoint and runs to the end.

results/attempts.jsonl: one line per rank and finished attempt (started_from, reached, host).
"""
import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
from hpctrain_progress import report

p = argparse.ArgumentParser()
p.add_argument("--iterations", type=int, default=20)
p.add_argument("--sleep", type=float, default=0.3)
p.add_argument("--hang-at", type=int, default=5)
p.add_argument("--hang-rank", type=int, default=3)
args = p.parse_args()

run_dir = os.environ["HPCTRAIN_RUN_DIR"]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
start = 0
resume = os.environ.get("HPCTRAIN_RESUME_FROM")
if resume:
    start = torch.load(resume)["next"]
marker = os.path.join(run_dir, "results", "hung-once")
os.makedirs(os.path.dirname(marker), exist_ok=True)
for it in range(start, args.iterations):
    t = torch.ones(1)
    dist.all_reduce(t)
    if it == args.hang_at and rank == args.hang_rank and not os.path.exists(marker):
        # After this iteration's all-reduce, before its report: the others report it and
        # then wait in the next all-reduce, one step ahead of this rank.
        open(marker, "w").close()
        print(f"rank {rank}: blocking forever at iteration {it}", flush=True)
        dist.recv(torch.zeros(1), src=(rank + 1) % world)  # nobody sends
    report(it + 1)
    if rank == 0:
        os.makedirs(os.path.join(run_dir, "checkpoints"), exist_ok=True)
        path = os.path.join(run_dir, "checkpoints", f"step_{it + 1:06d}.pt")
        torch.save({"next": it + 1}, path + ".tmp")
        os.replace(path + ".tmp", path)
    time.sleep(args.sleep)
with open(os.path.join(run_dir, "results", "attempts.jsonl"), "a") as f:
    f.write(json.dumps({"rank": rank, "started_from": start, "reached": args.iterations,
                        "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
                        "job_restart": int(os.environ.get("SLURM_RESTART_COUNT", 0))}) + "\n")
dist.destroy_process_group()

"""A real torch.distributed check: every rank all-reduces its rank and records what it saw.

Each rank writes results/rank-<RANK>.json into the run directory: rank, world size, host, the
all-reduce result (the sum of all ranks) — so a test (or you) can check that every rank joined
the same world and agreed. Runs on CPU (gloo) or GPU (nccl).
"""
import argparse
import json
import os
import socket

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3, help="all-reduces to run")
    parser.add_argument("--out", default=os.environ.get("HPCTRAIN_RUN_DIR", "."))
    args = parser.parse_args()

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    total = None
    for _ in range(args.steps):
        t = torch.tensor([float(rank)], device=device)
        dist.all_reduce(t)
        total = t.item()
    expected = world * (world - 1) / 2
    result = {
        "rank": rank, "local_rank": int(os.environ.get("LOCAL_RANK", 0)), "world_size": world,
        "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
        "allreduce": total, "expected": expected, "backend": backend, "device": str(device),
        "seed": os.environ.get("HPCTRAIN_SEED"),
    }
    os.makedirs(os.path.join(args.out, "results"), exist_ok=True)
    with open(os.path.join(args.out, "results", f"rank-{rank}.json"), "w") as f:
        json.dump(result, f)
    print(f"rank {rank}/{world} on {result['host']}: all_reduce = {total} (expected {expected})")
    dist.barrier()
    dist.destroy_process_group()
    if total != expected:
        raise SystemExit(f"rank {rank}: wrong all-reduce result {total}, expected {expected}")


if __name__ == "__main__":
    main()

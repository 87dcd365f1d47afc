"""A small stdlib-only rank program for the operations tests (no torch import: fast on 2 cores).

Each rank prints numbered lines for --seconds, records what it saw in
$HPCTRAIN_RUN_DIR/results/rank-R.json (start/end times, seed, port, the LR env value, the task
id), and raises on --fail-rank R, so a test can trace a failure to its rank. --report: each
step is reported to hpctrain as a training's iteration is; --slow-rank R: rank R runs at half speed.
"""
import argparse
import json
import os
import socket
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--report", action="store_true", help="report each step to hpctrain")
    parser.add_argument("--slow-rank", type=int, default=-1, help="this rank's steps take twice as long")
    args = parser.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    start = time.time()
    steps = max(1, int(args.seconds / 0.5))
    for i in range(steps):
        print(f"step {i} of rank {rank}", flush=True)
        if args.report:
            import hpctrain_progress  # the bootstrap provides it, as to a library's hooks
            hpctrain_progress.report(i + 1)
        time.sleep(args.seconds / steps * (2 if rank == args.slow_rank else 1))
    if rank == args.fail_rank:
        raise RuntimeError(f"deliberate failure on rank {rank}")
    out = os.path.join(os.environ["HPCTRAIN_RUN_DIR"], "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
        json.dump({"rank": rank, "start": start, "end": time.time(),
                   "seed": os.environ.get("HPCTRAIN_SEED"), "lr": os.environ.get("LR"),
                   "port": os.environ.get("HPCTRAIN_PORT"),
                   "job_id": os.environ.get("SLURM_JOB_ID"),
                   "task": os.environ.get("SLURM_ARRAY_TASK_ID"),
                   "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname()}, f)
    print(f"rank {rank} done", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()

"""A small real DDP training that survives preemption and restarts (the `command` library).

- Trains a tiny model for --iterations steps, sleeping --sleep s per step (so it runs long
  enough to be preempted), all ranks in lockstep (DDP all-reduces the gradients).
- Rank 0 saves a checkpoint (model, optimizer, next iteration) into $HPCTRAIN_CHECKPOINT_DIR
  every --save-every steps and when the preemption signal arrives ($HPCTRAIN_PREEMPT_SIGNAL,
  default SIGUSR2): written to a temporary name, then renamed, so a half-written file is never
  resumed from. After a signal the ranks agree (all-reduce of the flag) on one step at which to
  save and stop, then exit 0; hpctrain then requeues the job.
- On start it resumes from $HPCTRAIN_RESUME_FROM (set by hpctrain's bootstrap to the newest
  checkpoint of this run) if there is one.
- Each rank writes results/rank-R.json with the iteration it started from, the iteration it
  reached and why it stopped; results/attempts.jsonl gets one line per rank and attempt.
- Every iteration is reported to hpctrain (`hpctrain status`, `submit --wait`), and rank 0 logs
  its loss for TensorBoard into RUN_DIR/tensorboard/ (a new event file per attempt:
  `hpctrain plot` stitches them).

    hpctrain submit examples/resumable_train.yaml --site localcluster
"""
import argparse
import json
import os
import signal
import socket
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STOP = {"flag": False}

try:  # under hpctrain's bootstrap: the run's progress report (status/progress-R.json)
    from hpctrain_progress import report
except ImportError:
    def report(step, **metrics):
        pass


def tensorboard(run_dir: str):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # TensorBoard is optional here
        return None
    return SummaryWriter(os.path.join(run_dir, "tensorboard"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--sleep", type=float, default=0.5)
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--die-at", type=int, default=-1,
                        help="test hook: --die-rank kills itself (SIGKILL) at this iteration")
    parser.add_argument("--die-rank", type=int, default=1)
    parser.add_argument("--die-always", action="store_true",
                        help="test hook: die on every attempt (raise), not only the first")
    args = parser.parse_args()

    sig = getattr(signal, os.environ.get("HPCTRAIN_PREEMPT_SIGNAL", "SIGUSR2"))
    signal.signal(sig, lambda *_: STOP.update(flag=True))

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    run_dir = os.environ.get("HPCTRAIN_RUN_DIR", ".")
    ckpt_dir = os.environ.get("HPCTRAIN_CHECKPOINT_DIR", os.path.join(run_dir, "checkpoints"))
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    start = 0
    resume = os.environ.get("HPCTRAIN_RESUME_FROM")
    if resume:
        state = torch.load(resume, map_location="cpu")
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["iteration"]

    def save(next_iteration: int) -> None:
        if rank == 0:
            os.makedirs(ckpt_dir, exist_ok=True)
            path = os.path.join(ckpt_dir, f"model_{next_iteration:06d}.pt")
            torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                        "iteration": next_iteration}, path + ".tmp")
            os.replace(path + ".tmp", path)
            print(f"saved {path}", flush=True)
        dist.barrier()

    attempt = {"rank": rank, "world_size": world, "started_from": start, "resume_from": resume,
               "job_restart": int(os.environ.get("SLURM_RESTART_COUNT", 0)),
               "torchrun_restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)),
               "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname()}
    print(f"rank {rank}: starting at iteration {start}", flush=True)
    it, stopped = start, "completed"
    writer = tensorboard(run_dir) if rank == 0 else None
    gen = torch.Generator().manual_seed(1000 + rank)
    while it < args.iterations:
        if it == args.die_at and rank == args.die_rank:
            if args.die_always:
                raise RuntimeError(f"injected failure at iteration {it}")
            # Once per run: a marker on the shared run directory, not TORCHELASTIC_RESTART_COUNT,
            # which is per node (the node that did not fail may still say 0 after the restart,
            # and rank numbers may move between nodes).
            marker = os.path.join(run_dir, "results", f"killed-rank-{rank}-at-{it}")
            if not os.path.exists(marker):
                os.makedirs(os.path.dirname(marker), exist_ok=True)
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
        x = torch.randn(16, 8, generator=gen)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        it += 1
        report(it, loss=loss.item())
        if writer:
            writer.add_scalar("train/loss", loss.item(), it)
            writer.flush()
        time.sleep(args.sleep)
        flag = torch.tensor([1.0 if STOP["flag"] else 0.0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # one decision for all ranks
        if flag.item() > 0:
            save(it)
            stopped = "preempted"
            break
        if it % args.save_every == 0:
            save(it)
    if writer:
        writer.close()
    attempt.update(reached=it, stopped=stopped)
    os.makedirs(os.path.join(run_dir, "results"), exist_ok=True)
    with open(os.path.join(run_dir, "results", "attempts.jsonl"), "a") as f:
        f.write(json.dumps(attempt) + "\n")
    with open(os.path.join(run_dir, "results", f"rank-{rank}.json"), "w") as f:
        json.dump(attempt, f)
    print(f"rank {rank}: {stopped} at iteration {it}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

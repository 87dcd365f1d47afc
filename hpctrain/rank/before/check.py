"""The program `hpctrain doctor` runs in place of the job's own, with the job's settings: the
same launcher, rendezvous, bootstrap and environment. Each rank joins the process group with
the backend the bootstrap chose (NCCL on GPUs, gloo on CPU), times an all-reduce of several
sizes, and writes what it saw to RUN_DIR/doctor/rank-N.json for doctor.py to judge.

torch is imported inside main(): this file lives in rank/ (stdlib at import time) and runs
under the job's interpreter, which has it.
"""
from __future__ import annotations

import os
import socket
import sys
import time

SIZES = (1 << 10, 1 << 16, 1 << 20, 1 << 23)  # bytes: latency-bound up to bandwidth-bound
# The environment that decides where a rank runs and how it talks, reported as the rank saw it.
ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
       "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
       "NCCL_IB_HCA", "HPCTRAIN_CPU_MODE", "HPCTRAIN_CHECKPOINT_DIR", "SLURM_CPUS_PER_TASK")


def _allreduce(dist, torch, device, size: int, repeats: int) -> dict:
    n = max(1, size // 4)
    tensor = torch.ones(n, dtype=torch.float32, device=device)
    dist.all_reduce(tensor)  # warm-up: the first call sets up the connections
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        dist.all_reduce(tensor)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / repeats
    world = dist.get_world_size()
    # Bus bandwidth as nccl-tests define it: what each link carries in a ring all-reduce.
    busbw = (n * 4) * 2 * (world - 1) / world / seconds if seconds > 0 else 0.0
    correct = bool(torch.allclose(tensor.float()[:4].cpu(),
                                  torch.full((min(4, n),), float(world ** (repeats + 1)))))
    return {"bytes": n * 4, "seconds": seconds, "busbw_gbps": busbw / 1e9, "correct": correct}


def main() -> int:
    import torch
    import torch.distributed as dist

    ckpt_env = os.environ.get("HPCTRAIN_CHECKPOINT_DIR")  # RUN_DIR/checkpoints (bootstrap)
    run_dir = os.environ.get("HPCTRAIN_RUN_DIR") or (os.path.dirname(ckpt_env) if ckpt_env
                                                     else os.getcwd())
    rank = int(os.environ.get("RANK", "0"))
    out = {"rank": rank, "node": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
           "env": {k: os.environ.get(k) for k in ENV}, "python": sys.executable,
           "torch": torch.__version__}
    use_cuda = torch.cuda.is_available() and os.environ.get("HPCTRAIN_CPU_MODE") != "1"
    backend = "nccl" if use_cuda else "gloo"
    device = torch.device("cuda", torch.cuda.current_device()) if use_cuda else torch.device("cpu")
    out["device"] = str(device)
    if use_cuda:
        props = torch.cuda.get_device_properties(device)
        out["gpu"] = {"name": props.name, "uuid": str(getattr(props, "uuid", "")),
                      "bus": f"{getattr(props, 'pci_bus_id', '')}"}
    started = time.perf_counter()
    if not dist.is_initialized():
        dist.init_process_group(backend)
    out["backend"] = dist.get_backend()
    out["world_size"] = dist.get_world_size()
    out["init_seconds"] = time.perf_counter() - started
    out["allreduce"] = [_allreduce(dist, torch, device, size, 3 if size > (1 << 20) else 10)
                        for size in SIZES]
    ckpt = os.environ.get("HPCTRAIN_CHECKPOINT_DIR") or os.path.join(run_dir, "checkpoints")
    path = os.path.join(ckpt, f".doctor-rank-{rank}")
    try:
        os.makedirs(ckpt, exist_ok=True)
        with open(path, "w") as f:
            f.write(str(rank))
        os.remove(path)
        out["checkpoint_dir"] = {"dir": ckpt, "ok": True}
    except OSError as exc:
        out["checkpoint_dir"] = {"dir": ckpt, "ok": False, "error": str(exc)}
    dist.barrier()
    # Into the run directory through the rank side's one writer (no link below the run
    # directory, no pipe at the file): this file runs as a program, not inside the package, so
    # records.py (stdlib only, no relative import) is loaded by its path.
    _records().write_json(os.path.join(run_dir, "doctor", f"rank-{rank}.json"), out, indent=None,
                          root=run_dir)
    dist.destroy_process_group()
    print(f"hpctrain doctor: rank {rank} on {out['node']}: {out['backend']}, device {out['device']}",
          flush=True)
    return 0


def _records():
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "records.py")
    spec = importlib.util.spec_from_file_location("_hpctrain_doctor_records", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    sys.exit(main())

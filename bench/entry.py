"""The "user's program" of the launch and bootstrap rows: record when this rank entered it and,
under torchrun, when it was ready to train (torch imported, process group up, first barrier).

time.time() for the cluster row (the nodes are namespaces of one machine: one clock), monotonic
for the bootstrap row (one host, finer), and the peak RSS so far: what the launch path cost.
"Ready" is what a training job waits for: it counts torch's import wherever it happens (in the
program for a hand-written launch; in hpctrain's bootstrap, whose preflight rank check uses it).
"""
import json, os, resource, time

t_wall, t_mono = time.time(), time.monotonic()
out = os.environ["BENCH_OUT"]
rank = os.environ.get("RANK", "0")
record = {"rank": int(rank), "wall": t_wall, "monotonic": t_mono,
          "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}
if int(os.environ.get("WORLD_SIZE", "1")) > 1 and "MASTER_ADDR" in os.environ:  # under torchrun
    import torch.distributed as dist
    dist.init_process_group("gloo")
    dist.barrier()
    record["ready_wall"] = time.time()
    dist.destroy_process_group()
os.makedirs(out, exist_ok=True)
tmp = os.path.join(out, f".rank-{rank}.json")
with open(tmp, "w") as f:
    json.dump(record, f)
os.replace(tmp, os.path.join(out, f"rank-{rank}.json"))

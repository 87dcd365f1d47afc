"""The "user's program" of the launch and bootstrap rows: record when this rank entered it and,
under torchrun, when it was ready to train (torch imported, process group up, first barrier).

time.time() for the cluster row (the nodes are namespaces of one machine: one clock), monotonic
for the bootstrap row (one host, finer), and the peak RSS so far: what the launch path cost.
"Ready" is what a training job waits for: it counts torch's import wherever it happens (in the
program for a hand-written launch; in hpctrain's bootstrap, whose preflight rank check uses it).
"""
import json, os, resource, time

t_wall, t_mono = time.time(), time.monotonic()


def started_wall() -> float:
    """When this process was started (its fork by torchrun's agent), on the wall clock: the
    launch splits there into the agents' part (rendezvous) and the ranks' part (imports)."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - age  # /proc/stat's btime has whole seconds only


out = os.environ["BENCH_OUT"]
rank = os.environ.get("RANK", "0")
record = {"rank": int(rank), "wall": t_wall, "monotonic": t_mono, "started_wall": started_wall(),
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

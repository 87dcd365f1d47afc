"""The "user's program" of the launch and bootstrap rows: record the moment this rank entered it.

time.time() for the cluster row (the nodes are namespaces of one machine: one clock), monotonic
for the bootstrap row (one host, finer), and the peak RSS so far: what the launch path cost.
"""
import json, os, resource, time

t_wall, t_mono = time.time(), time.monotonic()
out = os.environ["BENCH_OUT"]
rank = os.environ.get("RANK", "0")
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
    json.dump({"rank": int(rank), "wall": t_wall, "monotonic": t_mono,
               "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}, f)

"""What DI-engine's DDP collector all-reduces after every collect, when the ranks' episodes differ.

ding's SampleSerialCollector reduces `collected_duration = sum(episode times)` with
allreduce_data: the int 0 on a rank that finished no episode since its last log line, a float on
a rank that did. ding's own allreduce_data turns those into int64 and float32 tensors (gloo: abort,
"8 vs 4"; a resumed DQN run died of it). Run under hpctrain (library: di_engine), each rank
reduces those values through the names the collector itself imported, plus the other scalar
reductions ding offers, and writes results/rank-R.json. policy.multi_gpu=True is not needed:
no policy here.
"""
import json
import os

from ding.utils import DDPContext, get_rank, get_world_size, reduce_data
from ding.worker.collector import sample_serial_collector as collector

with DDPContext():
    rank = get_rank()
    out = {
        "rank": rank,
        "world_size": get_world_size(),
        # rank 0 has no finished episode (sum([]) is the int 0), the others have one of 0.75 s
        "duration": collector.allreduce_data(sum([]) if rank == 0 else 0.75, "sum"),
        "samples": collector.allreduce_data(8 + rank, "sum"),
        "mean": collector.allreduce_data(rank + 1, "avg"),
        "reduced": reduce_data(rank + 1, 0),
    }
    out["types"] = {k: type(v).__name__ for k, v in out.items()}
    results = os.path.join(os.environ["HPCTRAIN_RUN_DIR"], "results")
    os.makedirs(results, exist_ok=True)
    with open(os.path.join(results, f"rank-{rank}.json"), "w") as f:
        json.dump(out, f)

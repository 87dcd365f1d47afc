"""The network floor (issue 29, item 2): before a multi-node job trains, one process per node
times an all-reduce across the nodes and one between each pair of neighbouring nodes, and the
job stops (its blamed nodes left out at the requeue) when the bus bandwidth is below the
site's or job's `health.allreduce_min_gbps`.

- GPUs: NCCL with NCCL_ALGO=Ring, one GPU per node (two-node bus bandwidth otherwise reads
  above what the network carries: NCCL's tree algorithm halves what crosses it); CPU: gloo.
- Pairs: (0,1), (2,3), … together, then (1,2), (3,4), …, then (n-1, 0): three rounds whatever
  the node count, so a bad node is in the two slowest pairs and is named alone. Two nodes are
  one pair: both are named.
- The measurement runs in a process of its own (`rank netfloor`), started by the node's launch
  once the node check passed: its CUDA context and its store on HPCTRAIN_SPARE_PORT are gone
  before torchrun's agent starts. The head writes status/netfloor.json (status, doctor); a
  failure is the node check's (status/preflight.json names the nodes, recovery leaves them out).

Bandwidths are in Gbit/s (a network's unit): nccl-tests' busbw (GB/s) times 8.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

SIZE = {"nccl": 64 << 20, "gloo": 4 << 20}  # bytes per all-reduce: bandwidth-bound
REPEATS = 3
RESULT = "netfloor.json"


def rounds(n: int) -> list[list[tuple[int, int]]]:
    """The neighbouring pairs of n nodes in rounds of disjoint pairs (none for one node; the
    one pair of two nodes is the whole set, measured as such)."""
    if n < 3:
        return []
    even = [(i, i + 1) for i in range(0, n - 1, 2)]
    odd = [(i, i + 1) for i in range(1, n - 1, 2)]
    return [r for r in (even, odd, [(n - 1, 0)]) if r]


def verdict(nodes: list[str], world_gbps: float, pairs: dict[tuple[int, int], float],
            floor: float) -> tuple[bool, list[str], str]:
    """(passed, the nodes to blame, one line) for a measured world and its pairs."""
    n = len(nodes)
    shown = f"all-reduce bus bandwidth {world_gbps:.3g} Gbit/s across {n} nodes"
    if world_gbps >= floor:
        return True, [], f"{shown} (floor {floor:g})"
    if not pairs:  # two nodes: the pair is the whole measurement
        blamed = list(nodes[:2])
        return False, blamed, (f"network floor: {shown}, below health.allreduce_min_gbps="
                               f"{floor:g}, between {nodes[0]} and {nodes[1]}")
    ordered = sorted(pairs.items(), key=lambda kv: kv[1])
    (a, b), slowest = ordered[0]
    text = (f"network floor: {shown}, below health.allreduce_min_gbps={floor:g}; slowest pair "
            f"{nodes[a]}-{nodes[b]} at {slowest:.3g} Gbit/s")
    if ordered[-1][1] < floor:  # no pair reaches it: the network, not a node, is below it
        return False, [], text + f", fastest {ordered[-1][1]:.3g}: every pair is below the floor"
    if slowest >= floor:  # each pair reaches it: the whole ring is slow, no node in it
        return False, [], text + ": every pair reaches the floor, the ring as a whole does not"
    blamed = [nodes[a], nodes[b]]
    if len(ordered) > 1 and ordered[1][1] < floor:  # two pairs below it: what do they share?
        common = {a, b} & set(ordered[1][0])
        if len(common) == 1:  # one node in both slowest pairs: it, not its neighbours
            [i] = common
            blamed = [nodes[i]]
            text += f" (the next slowest, {nodes[ordered[1][0][0]]}-{nodes[ordered[1][0][1]]} "\
                    f"at {ordered[1][1]:.3g} Gbit/s, also has {nodes[i]})"
    return False, blamed, text


def _busbw_gbps(dist, torch, tensor, group, members: int) -> float:
    dist.all_reduce(tensor, group=group)  # warm-up: the first call sets up the connections
    if tensor.is_cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(REPEATS):
        dist.all_reduce(tensor, group=group)
    if tensor.is_cuda:
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / REPEATS
    size = tensor.numel() * tensor.element_size()
    return size * 2 * (members - 1) / members / seconds * 8 / 1e9 if seconds > 0 else 0.0


def measure(index: int, nodes: list[str], head: str, port: int, timeout: float) -> dict:
    """This node's part; every node returns the same record: {backend, world_gbps, pairs:
    [[a, b, gbps]...], bytes}."""
    import datetime as _dt

    import torch
    import torch.distributed as dist

    n = len(nodes)
    limit = _dt.timedelta(seconds=max(1.0, timeout))
    store = dist.TCPStore(head, port, n, is_master=index == 0, timeout=limit,
                          wait_for_workers=True)
    cuda = torch.cuda.is_available() and os.environ.get("HPCTRAIN_CPU_MODE") != "1"
    backend = "nccl" if cuda else "gloo"
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend, store=store, rank=index, world_size=n, timeout=limit)
    try:
        tensor = torch.ones(SIZE[backend] // 4, dtype=torch.float32, device=device)
        # Each node times the same all-reduces a little differently: the head's is everyone's.
        store.set(f"world/{index}", f"{_busbw_gbps(dist, torch, tensor, None, n):.6g}")
        world = float(store.get("world/0").decode())
        for pairs in rounds(n):
            # Every process creates every group, in the same order (torch's rule).
            groups = [(pair, dist.new_group(list(pair))) for pair in pairs]
            mine = next(((p, g) for p, g in groups if index in p), None)
            if mine is not None:
                gbps = _busbw_gbps(dist, torch, tensor, mine[1], 2)
                if index == mine[0][0]:
                    store.set(f"pair/{mine[0][0]}/{mine[0][1]}", f"{gbps:.6g}")
            dist.barrier()
        pairs = [[a, b, float(store.get(f"pair/{a}/{b}").decode())]
                 for r in rounds(n) for a, b in r]
        dist.barrier()  # the head's store outlives every read of it
    finally:
        dist.destroy_process_group()
    return {"backend": backend, "bytes": SIZE[backend], "world_gbps": world, "pairs": pairs}


def run(settings: dict) -> int | None:
    """From the node's launch, after the node check: the measurement in a process of its own
    (`rank netfloor`: preflight.network_floor), NCCL held to its ring algorithm there alone.
    Its exit status; None when it did not end in time."""
    env = dict(os.environ, NCCL_ALGO="Ring")
    from ..records import RANK_FOLDER
    here = RANK_FOLDER
    # bootstrap.json lies in the run directory: numbers out of range are not taken from it.
    timeout = settings.get("timeout")
    timeout = float(timeout) if isinstance(timeout, (int, float)) and 1 <= timeout <= 3600 else 60.0
    floor = float(settings["min_gbps"])
    if not 0 <= floor <= 100_000:
        floor = 0.0
    try:
        return subprocess.run([sys.executable, here, "netfloor", f"{timeout:g}", f"{floor:g}"],
                              env=env, stdin=subprocess.DEVNULL, timeout=timeout + 30).returncode
    except subprocess.TimeoutExpired:
        return None


def read(run_dir: str) -> dict | None:
    """status/netfloor.json (a run directory's: untrusted), or None."""
    from ..records import read_json
    try:
        data = read_json(os.path.join(run_dir, "status", RESULT))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


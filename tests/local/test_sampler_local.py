"""The per-node sampler on a CPU node, against real processes: it reads each rank's CPU use
and RSS from /proc (hpctrain/rank/during/sampler.py), without a job around it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hpctrain.rank.records import RankIdentity


def test_cpu_sampler_leaves_out_a_rank_that_has_ended(tmp_path, monkeypatch):
    """An ended rank not yet reaped is a zombie: /proc still lists it, without VmRSS. The sampler
    gives the live rank's row and leaves the ended one out, rather than a row without memory."""
    import time
    from hpctrain.rank.during import sampler
    from hpctrain.rank.records import write_identity
    (tmp_path / "bootstrap.json").write_text(json.dumps({"sample_every": 0.2}))
    live = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        while "Z" not in Path(f"/proc/{ended.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]:
            time.sleep(0.05)
        node = sampler.node_name()
        for rank, proc in enumerate((live, ended)):
            write_identity(str(tmp_path / "status"), RankIdentity(
                rank=rank, local_rank=rank, world_size=2, local_world_size=2, node=node,
                pid=proc.pid, started=time.time()))
        s = sampler.Sampler(str(tmp_path), os.getppid(), 1)
        ticks = iter([True, True, True, False])
        monkeypatch.setattr(s, "parent_alive", lambda: next(ticks))
        s.ranks()
        s.out.close()
    finally:
        live.kill()
        live.wait()
        ended.wait()
    rows = [r for x in (tmp_path / "usage").glob("*.jsonl")
            for line in x.read_text().splitlines() for r in json.loads(line).get("r", [])]
    assert rows and {r[0] for r in rows} == {0}, rows
    assert all(r[1] > 10 and r[2] > 1000 for r in rows), rows


def test_cpu_sampler_finds_a_rank_that_starts_after_its_first_look(tmp_path, monkeypatch):
    """Ranks write their identity one after another; the sampler's first look can find only
    some of them. It looks again at every sample until all of the node's local ranks are known,
    so the late rank is sampled from its start, not half a minute later."""
    import time
    from hpctrain.rank.during import sampler
    from hpctrain.rank.records import write_identity
    (tmp_path / "bootstrap.json").write_text(json.dumps({"sample_every": 0.2}))
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    node = sampler.node_name()

    def identity(rank):
        write_identity(str(tmp_path / "status"), RankIdentity(
            rank=rank, local_rank=rank, world_size=2, local_world_size=2, node=node,
            pid=procs[rank].pid, started=time.time()))

    try:
        identity(0)
        s = sampler.Sampler(str(tmp_path), os.getppid(), 1)
        calls = iter(range(100))

        def alive():
            n = next(calls)
            if n == 1:
                identity(1)  # after the sampler's first look
            return n < 5

        monkeypatch.setattr(s, "parent_alive", alive)
        s.ranks()
        s.out.close()
    finally:
        for p in procs:
            p.kill()
            p.wait()
    rows = [r for x in (tmp_path / "usage").glob("*.jsonl")
            for line in x.read_text().splitlines() for r in json.loads(line).get("r", [])]
    assert {r[0] for r in rows} == {0, 1}, rows

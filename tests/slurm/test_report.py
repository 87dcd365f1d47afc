"""Issue 31 on the real local Slurm cluster: a 2-node rsl-rl run (one torchrun per node, real
srun) whose nodes run the stand-in nvidia-smi (tests/fakes: the real csv format streamed with
-lms, one stream per node) and the pass-through scontrol (tests/fakes/scontrol: the real
scontrol's answer, with the stand-in GPUs in its TRES). One sampler per node records its own
node's stream; the head records the attempt's allocation from scontrol (the test cluster keeps
no accounting for sacct); `hpctrain report` gives GPU-hours allocated = GPUs x the attempt's
elapsed time and the streamed samples' statistics."""
from __future__ import annotations

import json
import math
import subprocess
import sys

from tests.conftest import ROOT, submitted, wait_for_job

FAKES = ROOT / "tests" / "fakes"
STREAMS = ("12,87,40", "3,65,99,20")


def _p10(values):
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.1 * len(ordered)) - 1)]


def test_two_node_report_from_scontrol_and_each_nodes_stream(cli, cluster, tmp_path):
    # Every node of the cluster gets a stream of its own, one of two by its number's parity (so
    # that neighbours differ): the job may run on any two nodes of its partition
    # (scripts/test-all.sh sends this file to the side2 nodes).
    every = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True,
                           check=True).stdout.split()
    util = {node: STREAMS[int(node.removeprefix("node")) % 2] for node in set(every)}
    setup = (f"export PATH={FAKES}:$PATH FAKE_SMI_GPUS=2 FAKE_SCONTROL_GPUS_PER_NODE=2 "
             f"FAKE_SMI_ECHO={tmp_path}/echo-{{node}}.csv FAKE_SMI_PIDS={tmp_path}/smi.pids "
             + " ".join(f"FAKE_SMI_UTIL_{n}={u}" for n, u in util.items()))
    proc = cli("submit", ROOT / "examples/rl/rsl_rl_pendulum.yaml", "--site", cluster,
               "--set", f"python={sys.executable}", "--set", "resources.nodes=2",
               "--set", "resources.procs_per_node=1", "--set", "sample_every=0.3",
               "--set", "args=[--updates,20,--sleep,0.1,--num-envs,8,--steps,16]",
               "--set", f"setup=[{json.dumps(setup)}]", cwd=ROOT)
    job_id, run_dir = submitted(proc.stdout)
    info = wait_for_job(job_id)
    log = "".join(p.read_text() for p in (run_dir / "logs").glob("slurm-*.out"))
    assert info["JobState"] == "COMPLETED", log[-4000:]

    # One sampler per node, each with its own node's stream, tick for tick.
    files = {p.stem: p for p in (run_dir / "usage").glob("*.jsonl")}
    nodes = subprocess.run(["scontrol", "show", "hostnames", info["NodeList"]], capture_output=True,
                           text=True, check=True).stdout.split()
    assert len(nodes) == 2 and set(files) == set(nodes), (files, nodes, log[-3000:])
    lines = {n: [json.loads(x) for x in f.read_text().splitlines()] for n, f in files.items()}
    streamed = {}
    for node, recs in lines.items():
        starts = [x for x in recs if x.get("kind") == "start"]
        assert len(starts) == 1 and starts[0]["node"] == node and starts[0]["job_id"] == job_id
        assert starts[0]["attempt"] == 0 and starts[0]["nnodes"] == 2
        ticks = [x["g"] for x in recs if "g" in x]
        assert len(ticks) >= 3, recs
        echo = [[p.strip() for p in line.split(",")]
                for line in (tmp_path / f"echo-{node}.csv").read_text().splitlines()]
        streamed[node] = [echo[i:i + 2] for i in range(0, len(echo), 2)][:len(ticks)]
        for tick, rows in zip(ticks, streamed[node]):
            assert tick == [[int(r[0]), float(r[2]), float(r[3]), float(r[5])] for r in rows]
        assert {r[2] for rows in streamed[node] for r in rows} <= set(util[node].split(","))

    # The head's record of the attempt's allocation: scontrol's own TRES and counts.
    alloc = json.loads((run_dir / "status" / f"allocation-{job_id}-0.json").read_text())
    assert alloc["source"] == "scontrol" and alloc["job_id"] == job_id and alloc["attempt"] == 0
    assert alloc["gpus"] == 4 and "gres/gpu=4" in alloc["tres"] and alloc["nodes"] == 2
    assert alloc["cpus"] == int(info["NumCPUs"])

    report = json.loads(cli("report", run_dir.name, "--json", "--out", str(tmp_path)).stdout)
    assert report["allocation_source"] == "scontrol"
    (attempt,) = report["attempts"]
    start = min(x["time"] for recs in lines.values() for x in recs if x.get("kind") == "start")
    end = max([x["t"] for recs in lines.values() for x in recs if "t" in x]
              + [x["time"] for recs in lines.values() for x in recs if x.get("kind") == "end"])
    assert attempt["job_id"] == job_id and attempt["gpus"] == 4 and attempt["gpus_source"] == "scontrol"
    assert math.isclose(attempt["elapsed_s"], end - start)
    assert math.isclose(report["gpu_hours_allocated"], 4 * (end - start) / 3600)
    means = []
    for node, rows_by_tick in streamed.items():
        for gpu in (0, 1):
            utils = [float(rows[gpu][2]) for rows in rows_by_tick]
            got = next(g for g in report["gpus"] if g["node"] == node and g["index"] == gpu)
            assert got["samples"] == len(utils)
            assert math.isclose(got["mean_util"], sum(utils) / len(utils))
            assert got["p10_util"] == _p10(utils)
            assert got["mem_peak_mib"] == max(float(rows[gpu][3]) for rows in rows_by_tick)
            means.append(sum(utils) / len(utils))
    assert math.isclose(report["gpu_hours_used"], sum(means) / 100 * (end - start) / 3600)
    # Each rank (one per node) is reported with its node's GPU 0 (its local rank).
    for rank in report["ranks"]:
        assert rank["gpu"] == 0 and rank["node"] in util
    assert report["steps_per_s"] and report["lost_between_attempts_s"] == 0
    text = cli("report", run_dir.name, "--out", str(tmp_path)).stdout
    assert "allocated (scontrol)" in text and f"job {job_id}" in text and "x 4 GPU(s) [scontrol]" in text

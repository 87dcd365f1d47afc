"""Issues 31 and 40 on the real local Slurm cluster: a 2-node rsl-rl run (one torchrun per node,
real srun, 2 of each node's count-only GRES GPUs) whose nodes run the stand-in nvidia-smi
(tests/fakes: the real csv format streamed with -lms, one stream per node), requeued once with
`scontrol requeue` as soon as it runs. One sampler per node and attempt records its own node's
stream; the head records each attempt's allocation from scontrol; `hpctrain report` gives each
attempt from the cluster's accounting (sacct --duplicates: REQUEUED, then COMPLETED), GPU-hours
allocated = the GRES GPUs x sacct's elapsed time, the first attempt (ended before its first step)
lost whole, and the streamed samples' statistics."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time

from tests.conftest import ROOT, submitted, wait_for_job

FAKES = ROOT / "tests" / "fakes"
STREAMS = ("12,87,40", "3,65,99,20")


def _p10(values):
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.1 * len(ordered)) - 1)]


def _sacct(job_id: str) -> list[list[str]]:
    out = subprocess.run(["sacct", "-n", "-P", "-X", "--duplicates", "-j", job_id, "-o",
                          "State,ElapsedRaw,AllocTRES"], capture_output=True, text=True, check=True)
    return [line.split("|") for line in out.stdout.splitlines()]


def test_two_node_report_of_a_requeued_job_from_sacct_and_each_nodes_stream(cli, cluster, tmp_path):
    # Every node of the cluster gets a stream of its own, one of two by its number's parity (so
    # that neighbours differ): the job may run on any two nodes of its partition
    # (scripts/test-all.sh sends this file to the side2 nodes, which are exactly two: both
    # attempts run on the same nodes). Each attempt's stream is echoed to a file of its own.
    every = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True,
                           check=True).stdout.split()
    util = {node: STREAMS[int(node.removeprefix("node")) % 2] for node in set(every)}
    setup = (f"export PATH={FAKES}:$PATH FAKE_SMI_GPUS=2 "
             f"FAKE_SMI_ECHO={tmp_path}/echo-{{node}}-${{SLURM_RESTART_COUNT:-0}}.csv "
             f"FAKE_SMI_PIDS={tmp_path}/smi.pids "
             + " ".join(f"FAKE_SMI_UTIL_{n}={u}" for n, u in util.items()))
    proc = cli("submit", ROOT / "examples/rl/rsl_rl_pendulum.yaml", "--site", cluster,
               "--set", f"python={sys.executable}", "--set", "resources.nodes=2",
               "--set", "resources.procs_per_node=1", "--set", "resources.gpus_per_node=2",
               "--set", "sample_every=0.3",
               "--set", "args=[--updates,20,--sleep,0.1,--num-envs,8,--steps,16]",
               "--set", f"setup=[{json.dumps(setup)}]", cwd=ROOT)
    job_id, run_dir = submitted(proc.stdout)
    # Requeue it once as soon as it runs (what a preemption does): its first attempt ends
    # REQUEUED before its first step, the second runs to the end on the same nodes.
    deadline = time.monotonic() + 60
    while subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                         text=True).stdout.strip() != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    subprocess.run(["scontrol", "requeue", job_id], check=True)
    info = wait_for_job(job_id)
    log = "".join(p.read_text() for p in (run_dir / "logs").glob("slurm-*.out"))
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", log[-4000:]

    # One sampler per node and attempt, each with its own node's stream, tick for tick.
    files = {p.stem: p for p in (run_dir / "usage").glob("*.jsonl")}
    nodes = subprocess.run(["scontrol", "show", "hostnames", info["NodeList"]], capture_output=True,
                           text=True, check=True).stdout.split()
    assert len(nodes) == 2 and set(files) == set(nodes), (files, nodes, log[-3000:])
    lines = {n: [json.loads(x) for x in f.read_text().splitlines()] for n, f in files.items()}
    streamed: dict[tuple[str, int], list] = {}  # (node, attempt) -> the groups the samples saw
    for node, recs in lines.items():
        starts = [x for x in recs if x.get("kind") == "start"]
        assert [x["attempt"] for x in starts][-1] == 1 and all(
            x["node"] == node and x["job_id"] == job_id and x["nnodes"] == 2 for x in starts), starts
        attempt = None
        ticks: dict[int, list] = {}
        for x in recs:
            attempt = x["attempt"] if x.get("kind") == "start" else attempt
            if "g" in x:
                ticks.setdefault(attempt, []).append(x["g"])
        assert len(ticks.get(1, [])) >= 3, recs
        for a, got in ticks.items():
            echo = [[p.strip() for p in line.split(",")]
                    for line in (tmp_path / f"echo-{node}-{a}.csv").read_text().splitlines()]
            streamed[node, a] = [echo[i:i + 2] for i in range(0, len(echo), 2)][:len(got)]
            for tick, rows in zip(got, streamed[node, a]):
                assert tick == [[int(r[0]), float(r[2]), float(r[3]), float(r[5])] for r in rows]
            assert {r[2] for rows in streamed[node, a] for r in rows} <= set(util[node].split(","))

    # The head's record of the second attempt's allocation: scontrol's own TRES (the GRES).
    alloc = json.loads((run_dir / "status" / f"allocation-{job_id}-1.json").read_text())
    assert alloc["source"] == "scontrol" and alloc["job_id"] == job_id and alloc["attempt"] == 1
    assert alloc["gpus"] == 4 and "gres/gpu=4" in alloc["tres"] and alloc["nodes"] == 2

    # The report: sacct's record of each attempt (--duplicates), its GPUs and elapsed time.
    report = json.loads(cli("report", run_dir.name, "--json", "--out", str(tmp_path)).stdout)
    acct = _sacct(job_id)
    assert [row[0] for row in acct] == ["REQUEUED", "COMPLETED"], acct
    assert all("gres/gpu=4" in row[2] for row in acct), acct
    assert report["allocation_source"] == "accounting"
    first, second = report["attempts"]
    assert [(a["attempt"], a["state"], a["gpus"], a["gpus_source"], a["elapsed_s"]) for a in (first, second)] \
        == [(0, "REQUEUED", 4, "accounting", float(acct[0][1])), (1, "COMPLETED", 4, "accounting", float(acct[1][1]))]
    assert math.isclose(report["gpu_hours_allocated"], 4 * (first["elapsed_s"] + second["elapsed_s"]) / 3600)
    assert first["first_step_s"] is None and first["lost_s"] == first["elapsed_s"]
    assert second["first_step_s"] is not None and second["lost_s"] == second["first_step_s"]
    assert math.isclose(report["lost_between_attempts_s"], second["start"] - first["end"])
    assert report["lost_between_attempts_s"] > 0
    used = 0.0
    for a, attempt in enumerate((first, second)):
        per_gpu = []
        for node in nodes:
            for gpu in (0, 1):
                utils = [float(rows[gpu][2]) for rows in streamed.get((node, a), [])]
                if utils:
                    per_gpu.append(sum(utils) / len(utils))
        used += sum(per_gpu) / 100 * attempt["elapsed_s"] / 3600
    assert math.isclose(report["gpu_hours_used"], used)
    for node in nodes:
        for gpu in (0, 1):
            utils = [float(rows[gpu][2]) for a in (0, 1) for rows in streamed.get((node, a), [])]
            got = next(g for g in report["gpus"] if g["node"] == node and g["index"] == gpu)
            assert got["samples"] == len(utils)
            assert math.isclose(got["mean_util"], sum(utils) / len(utils))
            assert got["p10_util"] == _p10(utils)
    # Each rank (one per node) is reported with its node's GPU 0 (its local rank).
    for rank in report["ranks"]:
        assert rank["gpu"] == 0 and rank["node"] in util
    assert report["steps_per_s"]
    text = cli("report", run_dir.name, "--out", str(tmp_path)).stdout
    assert "allocated (accounting)" in text and f"job {job_id}" in text and "x 4 GPU(s) [accounting]" in text

"""Issues 40 and 50 on the real cluster with gloo: a 2-node x 2-rank GPU job whose rank 3 sleeps
in its own code before its first collective, while ranks 0-2 wait in all-reduce #1; no progress
reports, hang_timeout 20. The watcher asks every rank for its flight recorder's dump
(rank/during/flight.py) and ends them; rank 3's recorder holds no entry at all, which is what
names it (it enqueued nothing where the others did), with its node, and the requeued attempt
runs without that node and completes. Stalled between two collectives or busy in its own code
after one: tests/unit/test_flight_recorder.py, over real dumps of each, and
tests/local/test_hang_culprit_local.py."""
from __future__ import annotations

import json
import re
import sys

from tests.conftest import ROOT, submitted, wait_for_job
from tests.slurm.survive import slurm_log


def _hostnames(nodelist: str) -> set[str]:
    import subprocess
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True)
    return set(out.stdout.split())


def test_the_lagging_rank_is_named_with_its_node_and_the_requeue_leaves_it_out(cli, cluster, tmp_path):
    job = tmp_path / "late.yaml"
    job.write_text(json.dumps({
        "name": "late", "library": "command", "script": str(ROOT / "tests/programs/late_rank.py"),
        "args": ["--late-rank", "3", "--when", "before", "--first-attempt-only"], "python": sys.executable,
        # the nodes' GPUs as the health gate reads them (the stand-in nvidia-smi, no fault)
        "setup": [f"export PATH={ROOT / 'tests' / 'fakes'}:$PATH FAKE_SMI_GPUS=4"],
        "resources": {"nodes": 2, "procs_per_node": 2, "gpus_per_node": 2, "time": "00:05:00"},
        "launcher": {"hang_timeout": 20, "max_restarts": 0}, "preemption": {"max_requeues": 1}}))
    job_id, run_dir = submitted(cli("submit", job, "--site", cluster).stdout)
    info = wait_for_job(job_id, timeout=300)
    log = slurm_log(run_dir)
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", (info, log[-4000:])
    [hang] = [json.loads(line) for line in (run_dir / "status" / "failures.jsonl").read_text().splitlines()]
    ranks = {r["rank"]: r for r in hang["ranks"]}
    assert hang["reason"] == "hang" and sorted(ranks) == [0, 1, 2, 3], hang
    node = ranks[3]["node"]
    assert hang["nodes"] == [node] and re.fullmatch(r"node\d+", node), hang
    assert hang["message"].startswith(
        f"rank 3 on {node} (at late_rank.py:24 in <module>) held the others (flight recorder): "
        "it had enqueued no collective in process group 0; rank(s) 0, 1, 2 wait in #1 "
        "(gloo:all_reduce). no rank has progressed for 20 s"), hang
    # The stacks (SIGQUIT before SIGKILL) agree: rank 3 in its own code, the others in all_reduce.
    assert [(r, ranks[r]["culprit"], ranks[r]["stack"].endswith(" in all_reduce")) for r in sorted(ranks)] == [
        (0, False, True), (1, False, True), (2, False, True), (3, True, False)], hang
    assert sorted(p.name for p in (run_dir / "status" / "fr").glob("rank-*.json")) == [
        f"rank-{r}.json" for r in range(4)]
    assert f"recovery: hang failure, excluding {node}: requeueing job {job_id} without {node}" in log, log[-4000:]
    assert node in _hostnames(info["ExcNodeList"]) and node not in _hostnames(info["NodeList"]), info

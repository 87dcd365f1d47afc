"""The real Isaac Lab 3.0 across two Slurm nodes (1 rank each, Newton on the CPU, gloo), preempted by
Slurm mid-training: the stock `isaaclab train` saves through hpctrain's hooks on the signal,
the job requeues itself, and the next attempt resumes with `--checkpoint <that model_N.pt>`:
the iteration count, the checkpoints' numbers and the TensorBoard steps continue across the
attempts, in one run folder (issue 49, items 2, 3 and 5).

The job's nodes have no internet, like most compute nodes: the assets come from the suite's
own asset root through isaaclab_assets (ISAACSIM_ASSET_ROOT on every rank).
"""
from __future__ import annotations

import json
import math
import re

from tests.conftest import submitted, wait_for_job
from tests.isaaclab3 import cartpole_job, check_trained, checkpoints, write_job
from tests.slurm.survive import SIDE, preempt_by_high_job, slurm_log, wait_until

ITERATIONS = 24


def test_isaaclab3_preempted_across_nodes_resumes_where_it_saved(cli, cluster, tmp_path):
    job = cartpole_job("isaac3-cluster", ITERATIONS,
                       resources={"nodes": 2, "procs_per_node": 1, "time": "00:10:00"})
    job["args"] += ["agent.save_interval=2"]  # a Hydra override: periodic checkpoints to pass
    job_id, run_dir = submitted(cli("submit", write_job(tmp_path, job), "--site", cluster,
                                    *SIDE).stdout)
    seen = wait_until(lambda: max((i for i in checkpoints(run_dir) if i > 0), default=None),
                      400, "a periodic checkpoint past the start", job_id)
    high = preempt_by_high_job(job_id, tmp_path)
    info = wait_for_job(job_id, timeout=600)
    log = slurm_log(run_dir)
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", log[-4000:]
    assert wait_for_job(high, timeout=60)["JobState"] == "COMPLETED"

    first = [json.loads(p.read_text()) for p in sorted((run_dir / "results").glob("attempt-0-rank-*.json"))]
    assert len(first) == 2 and len({r["iteration"] for r in first}) == 1, first
    saved_at = first[0]["iteration"]  # every rank stopped after the same iteration
    assert seen < saved_at < ITERATIONS - 1, (seen, first)
    assert len({r["params_sha256"] for r in first}) == 1, first
    rank0 = (run_dir / "logs" / "rank-0.log").read_text(errors="replace")
    saved = checkpoints(run_dir)[saved_at]
    assert f"hpctrain: stop: SIGTERM: iteration {saved_at} saved to {saved}" in rank0, rank0[-3000:]
    # The requeued attempt was handed exactly that file (3.0's --checkpoint), not a folder's order.
    assert f"hpctrain: resuming from {saved} (job restart 1" in rank0, rank0[-3000:]
    assert f"Loading model checkpoint from: {saved}" in rank0, rank0[-3000:]

    # The resumed run trained on every rank from that iteration to the last, to one set of weights,
    # on both nodes; its checkpoints carry on the numbering in the same run folder.
    rs = check_trained(run_dir, world=2, hosts=2, last=ITERATIONS - 1)
    assert {r["started_from"] for r in rs} == {saved_at}, rs
    assert ITERATIONS - 1 in checkpoints(run_dir), sorted(checkpoints(run_dir))
    assert re.search(r"preemption: preempted by the scheduler: requeueing job " + job_id, log), log[-3000:]

    # TensorBoard: one step axis across both attempts (rsl-rl logs by iteration).
    from hpctrain.follow.curves import read_run
    [scalars] = read_run(str(run_dir))
    curve = scalars.curve("Loss/value")
    assert curve.attempts == 2 and curve.steps[-1] == ITERATIONS - 1, curve
    assert sorted(set(curve.steps)) == list(range(ITERATIONS)), curve
    assert all(math.isfinite(v) for v in curve.values)
    shown = json.loads(cli("status", job_id, "--json").stdout)["progress"]
    shown = shown[0] if isinstance(shown, list) else shown
    assert shown["step"] == ITERATIONS - 1 and shown["metric"] == "reward", shown

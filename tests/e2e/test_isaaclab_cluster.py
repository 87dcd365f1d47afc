"""The real Isaac Lab 3.0 across two Slurm nodes (1 rank each, Newton on the CPU, gloo), preempted by
Slurm mid-training: the stock `isaaclab train` saves through hpctrain's hooks on the signal,
the job requeues itself, and the next attempt resumes with `--checkpoint <that model_N.pt>`:
the iteration count, the checkpoints' numbers and the TensorBoard steps continue across the
attempts, in one run folder (issue 49, items 2, 3 and 5); then evaluated and its best checkpoint
exported by jobs derived from it (issue 52).

The job's nodes have no internet, like most compute nodes: the assets come from the suite's
own asset root through isaaclab_assets (ISAACSIM_ASSET_ROOT on every rank).
"""
from __future__ import annotations

import json
import math
import re

import pytest

from tests.conftest import submitted, wait_for_job
from tests.isaaclab3 import cartpole_job, check_trained, checkpoints, evaluated, write_job
from tests.e2e.test_preempt_rl import check_plot
from tests.slurm.survive import SIDE, preempt_by_high_job, slurm_log, wait_until

ITERATIONS = 24
# A job's time limit is its nodes' promise to Slurm: tests/slurm/test_pending.py reserves every
# node 5 minutes ahead, which a longer limit on the side nodes would refuse ("nodes busy").


def test_isaaclab3_preempted_across_nodes_resumes_where_it_saved(cli, cluster, tmp_path):
    job = cartpole_job("isaac3-cluster", ITERATIONS,
                       resources={"nodes": 2, "procs_per_node": 1, "time": "00:04:00"})
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

    # TensorBoard: rsl-rl's own event files in both attempts, one point per iteration on one step
    # axis, drawn by `hpctrain plot`.
    check_plot(cli, job_id, run_dir, rs, tmp_path)
    shown = json.loads(cli("status", job_id, "--json").stdout)["progress"]
    shown = shown[0] if isinstance(shown, list) else shown
    assert shown["step"] == ITERATIONS - 1 and shown["metric"] == "reward", shown

    # Evaluation (issue 52): the first and the last of the checkpoints both attempts saved (the
    # periodic ones and the one saved on the signal; how many depends on when the preemption
    # came), as one Slurm job array of one-rank tasks on the run's partition: two plays, each an
    # Isaac Lab start (~15 core-s here), are what the suite can pay for.
    its = sorted(checkpoints(run_dir))
    eval_dir, evals = evaluated(cli, run_dir, "--checkpoint", "all", "--every", str(len(its)))
    assert [e["iteration"] for e in evals] == [its[0], its[-1]], (its, evals)
    tasks = json.loads(cli("status", eval_dir.name, "--json").stdout)["state"]["tasks"]
    assert len(tasks) == 2 and all(t["state"] == "COMPLETED" for t in tasks), tasks

    # Export (issue 52): the best checkpoint by that evaluation, to ONNX and TorchScript, by one
    # 1-rank job derived from the run on its site, the check passing under the run's interpreter.
    top = max(evals, key=lambda e: (e["mean_return"], e["iteration"]))
    proc = cli("export", run_dir.name, "--checkpoint", "best", "--wait", "--json", timeout=600)
    record = json.loads(proc.stdout)
    assert record["checkpoint"] == top["checkpoint"] and record["library"] == "rsl_rl", record
    assert {f["name"] for f in record["files"]} == {"policy.onnx", "policy.pt"}, record
    check = record["check"]
    assert all(0 <= d <= check["tolerance"] for d in check["max_diff"].values()), check
    assert re.search(r"submitted \S+-export  run \S+  job [0-9]+  on ", proc.stderr), proc.stderr


# rl_games and skrl (PyTorch) through 3.0's one CLI: 2 nodes x 1 rank each, a few iterations.
# rl_games: its Cartpole minibatch (8192) must divide one rank's batch (32 envs x 16 steps), and
# torch.compile (on by default in 3.0's config) would spend ~40 s compiling on the CPU.
OTHERS = {
    "rl_games": (["--max_iterations", "4", "agent.params.config.minibatch_size=512",
                  "agent.params.config.torch_compile=false"],
                 "logs/rl_games/cartpole/hpctrain/nn/last_cartpole_ep_4_rew_*.pth", 4),
    "skrl": (["--max_iterations", "4"], "logs/skrl/cartpole/hpctrain*/checkpoints/agent_*.pt", 64),
}


@pytest.mark.parametrize("library", list(OTHERS))
def test_isaaclab3_rl_games_and_skrl_train_across_nodes(library, cli, cluster, tmp_path):
    import torch

    args, pattern, last_step = OTHERS[library]
    job = cartpole_job(f"isaac3-{library}", 1, library=library,
                       resources={"nodes": 2, "procs_per_node": 1, "time": "00:04:00"})
    job["args"] = ["--num_envs", "32", *args]
    job_id, run_dir = submitted(cli("submit", write_job(tmp_path, job), "--site", cluster,
                                    *SIDE).stdout)
    info = wait_for_job(job_id, timeout=600)
    log = slurm_log(run_dir)
    assert info["JobState"] == "COMPLETED", log[-4000:]
    for rank in (0, 1):
        text = (run_dir / "logs" / f"rank-{rank}.log").read_text(errors="replace")
        assert "isaaclab launch_simulation: --distributed on the CPU" in text, text[-3000:]
    saved = sorted(run_dir.glob(pattern), key=lambda p: p.stat().st_mtime)
    assert saved, sorted(run_dir.rglob("*.pt*"))
    # The library's optimizer took its steps: the newest checkpoint's Adam state counts them.
    newest = torch.load(saved[-1], map_location="cpu", weights_only=False)
    steps = [float(v) for v in _values_of(newest, "step")]
    assert steps and min(steps) > 0, (saved[-1], steps)
    shown = json.loads(cli("status", job_id, "--json").stdout)["progress"]
    shown = shown[0] if isinstance(shown, list) else shown
    assert shown["step"] == last_step, shown
    # Evaluation through 3.0's benchmark play of this library (issue 52): the newest checkpoint.
    _, evals = evaluated(cli, run_dir)
    assert [e["checkpoint"] for e in evals] == [str(saved[-1].relative_to(run_dir))], evals


def _values_of(obj, key):
    """Every value under `key` in a checkpoint's nested dicts (an optimizer's per-tensor state)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key and not isinstance(v, dict):
                yield v
            else:
                yield from _values_of(v, key)

"""The real Isaac Lab 3.0 on the local site: 2 ranks of rsl_rl on Isaac-Cartpole (Newton physics on
the CPU, gloo), from `hpctrain submit --wait` to rank 0's model_<N>.pt in the run, with `status`
showing the reward the train hooks report (issue 49, item 5); then every checkpoint of that run
evaluated by `hpctrain eval --checkpoint all` through `isaaclab benchmark play` and its newest
exported (issue 52); and a missing asset is one line naming the file and the setting."""
from __future__ import annotations

import json
import math

from tests.conftest import submitted
from tests.isaaclab3 import cartpole_job, check_trained, checkpoints, evaluated, write_job
from tests.operate_helpers import status_json

ITERATIONS = 4


def test_isaaclab3_trains_two_ranks_here_then_evaluates_every_checkpoint(cli, tmp_path):
    job = cartpole_job("isaac3-local", ITERATIONS)
    job["args"] += ["agent.save_interval=3"]  # model_0 and model_3 (the last): two to evaluate
    path = write_job(tmp_path, job)
    v = cli("validate", path).stdout
    assert "Isaac Lab 3.0.0 (environment" in v and "-m isaaclab train --rl_library rsl_rl" in v, v
    proc = cli("submit", path, "--wait", timeout=400)
    _, run_dir = submitted(proc.stdout)
    log = (run_dir / "logs" / "job.out").read_text(errors="replace")
    st = status_json(cli, run_dir.name)
    assert st["state"]["state"] == "COMPLETED", log[-4000:]
    # The CPU mode's isaaclab shim ran on every rank; no GPU was asked for anywhere.
    for rank in (0, 1):
        assert f"[rank {rank}] [hpctrain cpu_mode] isaaclab launch_simulation" in log, log[-4000:]
    check_trained(run_dir, world=2, hosts=1, last=ITERATIONS - 1)
    assert ITERATIONS - 1 in checkpoints(run_dir), sorted(checkpoints(run_dir))
    [shown] = st["progress"] if isinstance(st["progress"], list) else [st["progress"]]
    assert shown["step"] == ITERATIONS - 1 and shown["metric"] == "reward", shown
    assert math.isfinite(shown["value"]), shown
    evaluate_every_checkpoint(cli, run_dir)
    # The same run exported (Isaac Lab 3.0's rsl_rl: the actor from its params/agent.yaml,
    # exported as its play does, through rsl-rl's as_jit/as_onnx) under the venv's interpreter.
    record = json.loads(cli("export", run_dir.name, "--json", timeout=300).stdout)
    assert record["checkpoint"] == f"logs/rsl_rl/cartpole/hpctrain/model_{ITERATIONS - 1}.pt", record
    assert record["config"] == "logs/rsl_rl/cartpole/hpctrain/params/agent.yaml", record
    assert record["versions"]["torch"].startswith("2.11") and "isaaclab" in record["versions"], record
    assert record["observations"] == 4 and record["actions"] == 1, record  # Cartpole's
    assert max(record["check"]["max_diff"].values()) <= record["check"]["tolerance"], record
    assert sorted(p.name for p in (run_dir / record["folder"]).iterdir()) == \
        ["export.json", "policy.onnx", "policy.pt"]


def evaluate_every_checkpoint(cli, run_dir):
    """One job array over the run's checkpoints, each played by `isaaclab benchmark play` with the
    run's seed; the records land in the run and status, report --json and plot --eval show them."""
    saved = sorted(checkpoints(run_dir))
    assert saved == [0, ITERATIONS - 1], saved
    before = cli("eval", run_dir.name, "--checkpoint", "best", "--dry-run").stdout
    assert "best by training, no evaluation yet: the highest Train/mean_reward" in before, before
    _, evals = evaluated(cli, run_dir, "--checkpoint", "all")
    after = cli("eval", run_dir.name, "--checkpoint", "best", "--dry-run").stdout
    assert "best by evaluation: the highest mean return" in after, after
    assert [e["iteration"] for e in evals] == saved, evals
    assert "best by evaluation" in cli("status", run_dir.name).stdout
    assert cli("report", run_dir.name, "--json").stdout.count('"mean_return"') == 2
    drawn = cli("plot", run_dir.name, "--eval").stdout
    # beside the training curve: rsl_rl's own TensorBoard reward
    assert "evaluation: 2 checkpoint(s), iterations 0-3" in drawn and "Train/mean_reward" in drawn
    assert (run_dir / "plots" / "evaluation.png").stat().st_size > 0


def test_a_missing_asset_ends_with_the_file_and_the_setting(cli, tmp_path):
    """Nodes without internet meet Isaac Lab's assets first: the failure names the file and
    isaaclab_assets, once, instead of a traceback's last line."""
    empty = tmp_path / "assets"
    empty.mkdir()
    job = cartpole_job("isaac3-noassets", 1, num_envs=16, isaaclab_assets=str(empty),
                       resources={"nodes": 1, "procs_per_node": 1, "time": "00:10:00"})
    proc = cli("submit", write_job(tmp_path, job), "--wait", timeout=300, check=False)
    assert proc.returncode != 0, proc.stdout
    missing = f"{empty}/Isaac/IsaacLab/"
    [line] = [l for l in proc.stdout.splitlines() if l.startswith("failed: rank 0")]
    assert "Isaac Lab could not load the asset " + missing in line, proc.stdout
    assert "set isaaclab_assets" in line and "hpctrain doctor" in line, line

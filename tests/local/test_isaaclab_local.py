"""The real Isaac Lab 3.0 on the local site: 2 ranks of rsl_rl on Isaac-Cartpole (Newton physics on
the CPU, gloo), from `hpctrain submit --wait` to rank 0's model_<N>.pt in the run, with `status`
showing the reward the train hooks report (issue 49, item 5); then every checkpoint of that run
evaluated by `hpctrain eval --checkpoint all` through `isaaclab benchmark play` (issue 52)."""
from __future__ import annotations

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

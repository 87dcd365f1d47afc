"""`hpctrain eval` on the local site with a plain program (issue 52, item 1): a tiny torch policy
(tests/programs/eval_policy.py) really trains and saves three checkpoints, then every checkpoint
is evaluated by the program's own command under the plain contract ($HPCTRAIN_EVAL_CHECKPOINT,
_EPISODES, _SEED -> the JSON at $HPCTRAIN_EVAL_RESULT), as one array, its records in the run;
`best` then means best by evaluation and the evaluation is deterministic. (`plot --eval` is
drawn in test_isaaclab_local.py, beside a library's training curve.)"""
from __future__ import annotations

import json

from tests.conftest import ROOT, submitted
from tests.operate_helpers import status_json

PROGRAM = ROOT / "tests" / "programs" / "eval_policy.py"


def test_plain_program_trains_then_every_checkpoint_is_evaluated(cli, tmp_path):
    job = tmp_path / "policy.json"
    job.write_text(json.dumps({
        "name": "policy", "script": str(PROGRAM), "seed": 3,
        "args": ["--iterations", "30", "--save-every", "10"],
        "resources": {"nodes": 1, "procs_per_node": 1, "time": "00:05:00"}}))
    _, run_dir = submitted(cli("submit", job, "--wait", timeout=120).stdout)
    proc = cli("eval", run_dir.name, "--checkpoint", "all", "--episodes", "16", "--wait",
               timeout=120)
    assert "3 checkpoint(s), every checkpoint" in proc.stdout, proc.stdout
    _, eval_dir = submitted(proc.stdout)
    st = status_json(cli, run_dir.name)
    evals = st["evaluations"]
    assert [e["iteration"] for e in evals] == [10, 20, 30], (evals, st["evaluation_problems"])
    for e in evals:
        assert e["status"] == "ok" and e["episodes"] == 16 and e["seed"] == 3, e
        assert e["episode_length"] == 20 and e["eval_run"] == eval_dir.name, e
    returns = [e["mean_return"] for e in evals]
    assert returns[0] < returns[-1] <= 0, returns  # training made the policy better
    shown = cli("status", run_dir.name).stdout
    assert "best by evaluation (highest mean return): checkpoints/model_30.pt" in shown, shown
    assert f"evaluation of {run_dir}" in cli("status", eval_dir.name).stdout
    report = json.loads(cli("report", run_dir.name, "--json").stdout)
    assert [e["mean_return"] for e in report["evaluations"]] == returns

    # best: by evaluation, said so; evaluated again (one job, no array) to the same number.
    again = cli("eval", run_dir.name, "--checkpoint", "best", "--episodes", "16", "--wait",
                timeout=120).stdout
    assert "1 checkpoint(s), best by evaluation: the highest mean return" in again, again
    assert "(1 tasks)" not in again and "array" not in again
    after = status_json(cli, run_dir.name)["evaluations"]
    assert [e["mean_return"] for e in after] == returns  # same seed, same episodes
    assert after[-1]["eval_run"] != eval_dir.name


def test_a_program_without_the_contract_gets_a_failed_record_that_says_so(cli, tmp_path):
    """A program that ignores $HPCTRAIN_EVAL_CHECKPOINT (it trains again) writes no result: its
    record says failed and why, the evaluation fails, and status shows it in the run."""
    job = tmp_path / "known.json"
    job.write_text(json.dumps({
        "name": "known", "script": str(ROOT / "tests" / "programs" / "known_reward.py"),
        "args": ["--lr", "0.001", "--steps", "2", "--step-time", "0"],
        "resources": {"nodes": 1, "procs_per_node": 1, "time": "00:05:00"}}))
    _, run_dir = submitted(cli("submit", job, "--wait", timeout=120).stdout)
    proc = cli("eval", run_dir.name, "--wait", timeout=120, check=False)
    assert proc.returncode != 0 and "checkpoints/step-00002.json" in proc.stdout, proc.stdout
    [e] = status_json(cli, run_dir.name)["evaluations"]
    assert e["status"] == "failed" and e["mean_return"] is None, e
    assert "the program wrote no result to $HPCTRAIN_EVAL_RESULT" in e["error"], e
    assert "failed: the program wrote no result" in cli("status", run_dir.name).stdout

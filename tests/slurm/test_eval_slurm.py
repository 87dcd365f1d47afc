"""`hpctrain eval` on the real local Slurm cluster (issue 52, item 1): a plain torch program
(tests/programs/eval_policy.py) trains on one node and saves three checkpoints; `eval
--checkpoint all` is ONE Slurm job array over them, each task one rank on one node running the
program's own command in the run's code snapshot, each record written into the run."""
from __future__ import annotations

import json

from tests.conftest import ROOT, submitted, wait_for_job
from tests.operate_helpers import status_json

PROGRAM = ROOT / "tests" / "programs" / "eval_policy.py"


def test_eval_all_is_one_array_on_the_cluster(cli, cluster, tmp_path):
    job = tmp_path / "policy.json"
    job.write_text(json.dumps({
        "name": "policy-slurm", "script": str(PROGRAM), "seed": 5,
        "args": ["--iterations", "30", "--save-every", "10"],
        "resources": {"nodes": 1, "procs_per_node": 1, "time": "00:04:00"}}))
    job_id, run_dir = submitted(cli("submit", job, "--site", cluster, "--wait", timeout=300).stdout)
    assert wait_for_job(job_id, timeout=60)["JobState"] == "COMPLETED"

    dry = cli("eval", run_dir.name, "--checkpoint", "all", "--dry-run").stdout
    assert "#SBATCH --array=0-2" in dry and "#SBATCH --nodes=1" in dry, dry
    proc = cli("eval", run_dir.name, "--checkpoint", "all", "--episodes", "8", "--wait",
               timeout=400)
    eval_job, eval_dir = submitted(proc.stdout)
    assert "(3 tasks)" in proc.stdout, proc.stdout
    st = status_json(cli, eval_job)
    assert st["state"]["state"] == "COMPLETED", st
    assert [t["job"] for t in st["state"]["tasks"]] == [f"{eval_job}_{i}" for i in range(3)]
    assert st["derived_from"] == {"run": str(run_dir), "purpose": "evaluation"}
    evals = status_json(cli, run_dir.name)["evaluations"]
    assert [e["iteration"] for e in evals] == [10, 20, 30], evals
    assert all(e["status"] == "ok" and e["eval_run"] == eval_dir.name and e["seed"] == 5
               for e in evals), evals
    assert evals[0]["mean_return"] < evals[-1]["mean_return"], evals
    # Each task played its own checkpoint on a node of the cluster; logs reaches a task by id.
    for i in range(3):
        log = (eval_dir / "tasks" / str(i) / "logs" / "rank-0.log").read_text(errors="replace")
        assert f"hpctrain: evaluated checkpoints/model_{(i + 1) * 10}.pt" in log, log[-2000:]
    assert "hpctrain: evaluated checkpoints/model_20.pt" in cli("logs", f"{eval_job}_1").stdout

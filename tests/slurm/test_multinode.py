"""End to end on the real local Slurm cluster: hpctrain submit -> sbatch -> srun -> torchrun."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import read_results, submitted, wait_for_job


def test_two_nodes_two_ranks_allreduce(cli, cluster):
    # A submitting shell with a stale rank identity (it ran torchrun or a JAX job before): sbatch
    # exports it to the job, which must not let it through to the ranks.
    stale = {"RANK": "7", "WORLD_SIZE": "99", "MASTER_ADDR": "127.0.0.1", "JAX_WORLD_SIZE": "8",
             "HPCTRAIN_SEED": "5"}
    proc = cli("submit", "examples/ddp_check.yaml", "--site", cluster,
               "--set", f"python={sys.executable}", env=stale)
    job_id, run_dir = submitted(proc.stdout)
    info = wait_for_job(job_id)
    log = "".join(p.read_text() for p in (run_dir / "logs").glob("slurm-*.out"))
    assert info["JobState"] == "COMPLETED", log
    assert info["ExitCode"] == "0:0"

    results = read_results(run_dir)
    assert sorted(r["rank"] for r in results) == [0, 1, 2, 3], log
    assert {r["world_size"] for r in results} == {4}
    assert len({r["host"] for r in results}) == 2, results  # two distinct nodes
    assert {r["allreduce"] for r in results} == {6.0}  # 0+1+2+3 on every rank
    assert sorted(r["seed"] for r in results) == ["1234", "1235", "1236", "1237"]  # global-rank offset

    # The run directory is enough to understand and resubmit the run.
    for name in ("job.yaml", "job.sbatch", "rank/__main__.py", "bootstrap.json", "run.json"):
        assert (run_dir / name).is_file(), name
    record = json.loads((run_dir / "run.json").read_text())
    assert record["job_id"] == job_id and record["site"] == "localcluster"
    assert record["hpctrain_version"] and "submitted" in record
    assert set(record["git"]) == {"commit", "dirty"} and record["git"]["commit"]
    assert (run_dir / "logs" / f"slurm-{job_id}.out").is_file()
    assert sorted(p.name for p in (run_dir / "logs").glob("rank-*.log")) == [
        "rank-0.log", "rank-1.log", "rank-2.log", "rank-3.log"]
    # The head is the first node of the job's own node list, whichever nodes the job got.
    first = subprocess.run(["scontrol", "show", "hostnames", info["NodeList"]], capture_output=True,
                           text=True).stdout.split()[0]
    assert f"rendezvous: {first}:" in log


def test_failed_sbatch_leaves_nothing_behind(cli, cluster, tmp_path, monkeypatch):
    # The job's own partition reaches sbatch only where no SBATCH_PARTITION overrides it (as
    # scripts/test-all.sh sets for the sessions beside the Slurm tier).
    monkeypatch.delenv("SBATCH_PARTITION", raising=False)
    proc = cli("submit", "examples/ddp_check.yaml", "--site", cluster,
               "--set", "resources.partition=nosuchpartition", check=False)
    assert proc.returncode == 2, proc.stderr
    assert "sbatch refused the job" in proc.stderr
    assert "invalid partition" in proc.stderr.lower()  # Slurm's own words
    assert "Traceback" not in proc.stderr
    runs = tmp_path / "runs"
    assert not runs.exists() or not any(runs.rglob("run.json"))
    assert not runs.exists() or not any(runs.iterdir())


def test_dry_run_submits_nothing(cli, cluster, tmp_path):
    proc = cli("submit", "examples/ddp_check.yaml", "--site", cluster, "--dry-run")
    assert proc.stdout.startswith("# would run: sbatch --parsable ")
    assert "#SBATCH --nodes=2" in proc.stdout
    # Two nodes: torchrun starts through hpctrain's launch, after the node check.
    assert '"$RUN_DIR/rank" launch 60 --nnodes="$NNODES"' in proc.stdout
    assert "--rdzv-backend=c10d" in proc.stdout
    assert not (tmp_path / "runs").exists()

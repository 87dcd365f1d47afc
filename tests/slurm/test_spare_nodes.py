"""Issue 43 on the real local Slurm cluster: a 2-node job with one spare holds 3 nodes. The
stand-in nvidia-smi (tests/fakes) reports an uncorrected ECC error on the second node's GPU;
its health gate names it, the batch shell swaps the idle spare in and the job trains on the two
healthy nodes in the same job id — no requeue (Restarts=0) — and `status` shows the swap.
Then a node Slurm declares down mid-training is replaced the same way, and training resumes
from its checkpoint."""
from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.conftest import ROOT, submitted, wait_for_job
from tests.slurm.survive import slurm_log, wait_for_checkpoint

FAKES = ROOT / "tests" / "fakes"


def test_a_node_with_an_ecc_error_is_replaced_by_the_spare_without_a_requeue(cli, cluster, tmp_path):
    bad = tmp_path / "bad-node"
    setup = [f"export PATH={FAKES}:$PATH FAKE_SMI_GPUS=1",
             f"[[ -s {bad} ]] || scontrol show hostnames \"$SLURM_JOB_NODELIST\" | sed -n 2p > {bad}",
             f"export FAKE_SMI_FAULT_$(cat {bad})=ecc:0:3"]
    job = tmp_path / "spares.yaml"
    job.write_text(json.dumps({
        "name": "spares", "python": sys.executable, "script": "tests/programs/worker.py",
        "args": ["--seconds", 2, "--report"], "setup": setup,
        "resources": {"nodes": 2, "spare_nodes": 1, "gpus_per_node": 1, "procs_per_node": 1}}))
    job_id, run_dir = submitted(cli("submit", job, "--site", cluster, cwd=ROOT).stdout)
    info = wait_for_job(job_id, timeout=180)
    log = "".join(p.read_text() for p in (run_dir / "logs").glob("slurm-*.out"))
    assert info["JobState"] == "COMPLETED", log[-4000:]
    assert info["Restarts"] == "0", info  # SLURM_RESTART_COUNT unset: never requeued
    allocation = subprocess.run(["scontrol", "show", "hostnames", info["NodeList"]],
                                capture_output=True, text=True, check=True).stdout.split()
    victim = bad.read_text().strip()
    assert len(allocation) == 3 and victim == allocation[1], allocation
    spare = allocation[2]
    assert f"nodes: {allocation[0]},{victim} of the allocation {','.join(allocation)}" in log, log[-4000:]
    assert re.search(rf"spares: {victim} replaced by {spare} after the preflight failure, "
                     rf"excluding {victim}; attempt 2 of job {job_id} starts now", log), log[-4000:]
    assert f"nodes: {allocation[0]},{spare} of the allocation" in log, log[-4000:]
    assert "requeueing job" not in log, log[-4000:]
    results = [json.loads(p.read_text()) for p in (run_dir / "results").glob("rank-*.json")]
    assert sorted(r["host"] for r in results) == sorted([allocation[0], spare]), results
    status = cli("status", str(run_dir)).stdout
    assert re.search(rf"^replaced  attempt 2 of job {job_id}: {victim} out, {spare} in \(preflight "
                     rf"failure, excluding {victim}\); training again \d+ s after the failure$",
                     status, re.M), status
    [rep] = json.loads(cli("status", str(run_dir), "--json").stdout)["replacements"]
    assert rep["attempt"] == 1 and rep["back_s"] > 0, rep


def test_a_node_that_goes_down_mid_training_is_replaced_and_training_resumes(cli, cluster):
    """The node Slurm declares down (what it does once a node's link is cut and SlurmdTimeout
    passes; here at once, with scontrol) while the job trains: --no-kill keeps the allocation,
    the launch fails, the batch shell finds the node down, a spare takes its place and the
    ranks resume from the newest checkpoint — same job id, no requeue."""
    job_id, run_dir = submitted(cli(
        "submit", "examples/resumable_train.yaml", "--site", cluster,
        "--set", f"python={sys.executable}", "--set", "resources.procs_per_node=1",
        "--set", "resources.spare_nodes=1",
        "--set", "args=[--iterations,24,--sleep,0.3,--save-every,4]", cwd=ROOT).stdout)
    wait_for_checkpoint(run_dir, job_id)
    chosen = json.loads((run_dir / "status" / "spares.json").read_text())["chosen"]
    victim = chosen[1]  # not the batch shell's node (the first of the allocation)
    subprocess.run(["scontrol", "update", f"nodename={victim}", "state=down",
                    "reason=hpctrain spare test"], check=True)
    try:
        info = wait_for_job(job_id, timeout=240)
    finally:
        # (Back in service once its slurmd registers again: ReturnToService=2.)
        subprocess.run(["scontrol", "update", f"nodename={victim}", "state=resume"],
                       capture_output=True)
    log = slurm_log(run_dir)
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "0", (info, log[-4000:])
    assert f"nodes: Slurm reports {victim} down or no longer in the job" in log, log[-4000:]
    assert re.search(rf"spares: {victim} replaced by node\d after the ranks failure, excluding "
                     rf"{victim}; attempt 2 of job {job_id} starts now", log), log[-4000:]
    rank0 = (run_dir / "logs" / "rank-0.log").read_text()
    assert "hpctrain: resuming from" in rank0, rank0[-3000:]
    [rep] = json.loads(cli("status", str(run_dir), "--json").stdout)["replacements"]
    assert rep["out"] == [victim] and rep["in"] != [victim] and rep["back_s"] > 0, rep
    status = cli("status", str(run_dir)).stdout
    assert f"; {victim} replaced by a spare (no requeue)" in status, status

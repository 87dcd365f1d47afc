"""A real preemption (a `high` job takes the nodes) of a job at its requeue cap ends it for good,
on either release. Slurm 24.05+ requeues a job whose batch script ends during a preemption's
grace time by itself (docs/slurm-releases.md): the job script makes the job non-requeueable
before it ends, so `preemption.max_requeues` still holds there. (The requeue below the cap, on
both releases, is tests/slurm/test_notify.py's.)"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import submitted, wait_for_job
from tests.slurm.survive import preempt_by_high_job, slurm_log, wait_for_checkpoint

JOB = "examples/resumable_train.yaml"


@pytest.fixture
def jobs():
    ids: list[str] = []
    try:
        yield ids
    finally:
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True)


def test_preempted_job_at_its_requeue_cap_is_not_requeued(cli, cluster, tmp_path, jobs):
    job_id, run_dir = submitted(cli(
        "submit", JOB, "--site", cluster, "--set", f"python={sys.executable}",
        "--set", "resources.nodes=1", "--set", "resources.procs_per_node=1",
        "--set", "args=[--iterations,400,--sleep,0.5,--save-every,5]",
        "--set", "preemption.max_requeues=0").stdout)
    jobs.append(job_id)
    wait_for_checkpoint(run_dir, job_id)
    jobs.append(preempt_by_high_job(job_id, tmp_path))
    info = wait_for_job(job_id, timeout=300, states=("FAILED", "PREEMPTED", "COMPLETED", "CANCELLED"))
    log = slurm_log(run_dir)
    # 22.05: FAILED (exit 75); 24.11: PREEMPTED (Slurm's state for a job that ended in its grace
    # time and is not requeueable). Requeued, it would have run again (Restarts=1).
    assert info["JobState"] in {"FAILED", "PREEMPTED"} and info["Restarts"] == "0", (info, log)
    assert f"preemption: not requeueing: job {job_id} has been requeued 0 time(s)" in log, log
    assert "could not make job" not in log, log
    failure = json.loads((run_dir / "status" / "failure.json").read_text())
    assert failure["reason"] == "preempted" and failure["exit_status"] == 75, failure

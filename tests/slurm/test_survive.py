"""Preemption -> checkpoint -> requeue -> resume, restart caps, torchrun restarts and the
rendezvous preflight, on the real local Slurm cluster with a real DDP training."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from tests.conftest import read_results, submitted, wait_for_job
from tests.slurm.survive import attempts, preempt, slurm_log, wait_for_checkpoint, wait_until

pytestmark = pytest.mark.slurm
JOB = "examples/resumable_train.yaml"


def submit(cli, cluster, *sets):
    args = ["submit", JOB, "--site", cluster, "--set", f"python={sys.executable}"]
    for s in sets:
        args += ["--set", s]
    return submitted(cli(*args).stdout)


def test_preempted_job_saves_requeues_and_resumes(cli, cluster):
    job_id, run_dir = submit(cli, cluster, "args=[--iterations,40,--sleep,0.5,--save-every,5]")
    wait_for_checkpoint(run_dir, job_id)
    preempt(job_id)
    info = wait_for_job(job_id, timeout=400)
    log = slurm_log(run_dir)
    assert info["JobState"] == "COMPLETED", log
    assert info["Restarts"] == "1", info

    runs = attempts(run_dir)
    first = [a for a in runs if a["job_restart"] == 0]
    second = [a for a in runs if a["job_restart"] == 1]
    assert len(first) == 4 and len(second) == 4, runs
    assert {a["stopped"] for a in first} == {"preempted"}, runs
    saved = {a["reached"] for a in first}
    assert len(saved) == 1, runs  # all ranks agreed on the step at which to save
    saved_at = saved.pop()
    # The second run resumed from the checkpoint saved on the signal — not from 0 and not
    # from an older periodic one.
    assert {a["started_from"] for a in second} == {saved_at}, runs
    assert saved_at > 0
    assert {a["resume_from"] for a in second} == {
        str(run_dir / "checkpoints" / f"model_{saved_at:06d}.pt")}
    assert {a["stopped"] for a in second} == {"completed"} and {a["reached"] for a in second} == {40}
    assert all(a["resume_from"] is None and a["started_from"] == 0 for a in first)
    # Every step is in the log, with a timestamp.
    stamp = r"\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\] hpctrain: "
    for line in ("preemption: SIGUSR2 received; forwarded to the ranks",
                 "preemption: the ranks exited (status 0)",
                 f"preemption: requeueing job {job_id} (requeue 1 of at most 2)",
                 "done: all ranks exited 0"):
        assert re.search(stamp + re.escape(line), log), (line, log)
    assert not (run_dir / "status" / "failure.json").exists()


def test_requeue_cap_ends_the_job(cli, cluster):
    job_id, run_dir = submit(cli, cluster, "args=[--iterations,400,--sleep,0.5,--save-every,5]",
                             "preemption.max_requeues=1")
    wait_for_checkpoint(run_dir, job_id)
    preempt(job_id)
    # Requeued once (the cap allows one); once the second run trains, preempt it again.
    rank0 = run_dir / "logs" / "rank-0.log"

    def second_run_training():
        text = rank0.read_text() if rank0.exists() else ""
        return "starting at iteration" in text.partition("hpctrain: resuming from")[2]
    wait_until(second_run_training, 240, "the second run to train", job_id)
    preempt(job_id)
    info = wait_for_job(job_id, timeout=300)
    log = slurm_log(run_dir)
    assert info["JobState"] == "FAILED", log
    assert info["ExitCode"] == "75:0", info
    assert info["Restarts"] == "1", info
    assert re.search(r"hpctrain: preemption: not requeueing: job \d+ has been requeued 1 time\(s\), "
                     r"the limit is preemption.max_requeues=1", log), log
    failure = json.loads((run_dir / "status" / "failure.json").read_text())
    assert failure["reason"] == "preempted" and failure["exit_status"] == 75
    assert "max_requeues=1" in failure["message"]
    # The second run had resumed from the first run's checkpoint before being preempted again.
    second = [a for a in attempts(run_dir) if a["job_restart"] == 1]
    assert second and {a["started_from"] for a in second} != {0}, attempts(run_dir)

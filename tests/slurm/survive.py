"""Helpers for tests that preempt, requeue and restart real jobs (reusable by the RL-library
tests: submit a job, wait until its ranks have made progress, preempt it, follow its runs)."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from tests.conftest import job_state


def slurm_log(run_dir: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted((run_dir / "logs").glob("slurm-*.out")))


def attempts(run_dir: Path) -> list[dict]:
    path = run_dir / "results" / "attempts.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_until(predicate, timeout: float, what: str, job_id: str | None = None, poll: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    if job_id:
        subprocess.run(["scancel", str(job_id)])
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def wait_for_checkpoint(run_dir: Path, job_id: str, timeout: float = 240) -> list[Path]:
    """Until the training has saved at least one periodic checkpoint (it is past its start)."""
    return wait_until(lambda: sorted((run_dir / "checkpoints").glob("model_*.pt")), timeout,
                      "a first checkpoint", job_id)


def preempt(job_id: str, signal: str = "USR2") -> None:
    """What Slurm does ahead of the time limit (`--signal=B:USR2@lead`): the signal to the batch
    shell only. A real preemption is preempt_by_high_job."""
    subprocess.run(["scancel", f"--signal={signal}", "--batch", str(job_id)], check=True)


# The partition that preempts each of the test cluster's (tests/cluster/up.sh): same nodes,
# higher PriorityTier.
HIGHER = {"debug": "high", "side": "sidehigh", "side2": "side2high"}
# A job sent to the side nodes (node5..node7): the e2e tier runs there, beside tests/slurm,
# whose preemptions and node faults stay on node1..node4 (scripts/test-all.sh).
SIDE = ("--set", "resources.partition=side")


def preempt_by_high_job(job_id: str, tmp_path) -> str:
    """A job in the higher-priority partition that needs the victim's nodes: Slurm preempts."""
    info = job_state(job_id)
    nodes, count = info["NodeList"], info["NumNodes"]
    high = HIGHER[info["Partition"]]
    out = subprocess.run(["sbatch", "--parsable", "-p", high, "--exclusive", "-N", count, "-w", nodes,
                          "-o", str(tmp_path / "high.out"), "--wrap", "sleep 1"],
                         capture_output=True, text=True, check=True).stdout
    return out.strip().split(";")[0]


def restart_count(job_id: str) -> int:
    return int(job_state(job_id).get("Restarts", "0"))

"""Slurm through its command-line tools: sbatch, squeue/scontrol/sacct (via slurmstate), scancel."""
from __future__ import annotations

from pathlib import Path

from ..errors import HpctrainError
from ..runs import Run
from .base import JobState
from .summary import fmt_elapsed, summarise


def _run(cmd: list[str], timeout: float = 60) -> "subprocess.CompletedProcess":
    # Imported here: render picks this backend for its script name only, and subprocess (with
    # threading, selectors, signal) is ~2 ms of the ~100 ms that `hpctrain render` takes.
    import subprocess
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise HpctrainError(f"'{cmd[0]}' is not installed here: this site submits to Slurm",
                            fix="run hpctrain on a Slurm login node, or use --site local") from None
    except subprocess.TimeoutExpired:
        raise HpctrainError(f"'{' '.join(cmd)}' did not answer within {timeout:.0f}s: is slurmctld up?") from None


def _state(rec) -> JobState:  # rec: slurmstate.Record
    return JobState(state=rec.state, exit_code=rec.exit_code if rec.state != "PENDING" else None,
                    reason=rec.reason, nodes=rec.nodes, elapsed=fmt_elapsed(rec.elapsed()),
                    restarts=rec.restarts, job=rec.name)


class SlurmBackend:
    name = "slurm"
    script_name = "job.sbatch"

    def submit_command(self, script: Path) -> list[str]:
        return ["sbatch", "--parsable", str(script)]

    def submit(self, run: Run, script: Path) -> str:
        proc = _run(self.submit_command(script))
        if proc.returncode != 0:
            msg = proc.stderr.strip() or proc.stdout.strip() or f"exit status {proc.returncode}"
            raise HpctrainError(f"sbatch refused the job: {msg}",
                                fix="check partition/account/qos/time against `sinfo` and the site "
                                "profile; `hpctrain submit --dry-run` shows the script")
        return proc.stdout.strip().split(";")[0]

    def state(self, run: Run) -> JobState:
        rec = run.record
        job_id = str(rec["job_id"])
        from .. import slurmstate  # not on render's import path: it only needs the script name
        records = slurmstate.query(job_id)
        size = rec.get("array_size")
        if not size:
            mine = next((r for r in records if r.job_id == job_id), None)
            if mine is None:
                # Gone from slurmctld's memory (older than MinJobAge) and no accounting to ask.
                return JobState("UNKNOWN", job=job_id, reason="Slurm no longer remembers this job")
            return _state(mine)
        tasks = []
        for i in range(size):
            done = next((r for r in records if r.task == i), None)
            pending = next((r for r in records if i in r.pending_tasks), None)
            if done is not None:
                tasks.append(_state(done))
            elif pending is not None:
                st = _state(pending)
                st.job, st.exit_code, st.elapsed = f"{job_id}_{i}", None, None
                tasks.append(st)
            else:
                # A pending task that was cancelled leaves no record at all.
                tasks.append(JobState("CANCELLED" if rec.get("cancelled") else "UNKNOWN",
                                      job=f"{job_id}_{i}"))
        return summarise(job_id, tasks)

    def cancel(self, run: Run) -> None:
        self.abort(run.record["job_id"])  # the array's id cancels every task

    def abort(self, job_id: str) -> None:
        proc = _run(["scancel", str(job_id)])
        if proc.returncode != 0:
            raise HpctrainError(f"scancel {job_id} failed: {proc.stderr.strip()}")

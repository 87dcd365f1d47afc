"""Slurm through its command-line tools: sbatch, scontrol, squeue, scancel."""
from __future__ import annotations

from pathlib import Path

from ..errors import HpctrainError
from ..runs import Run
from .base import JobState


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


def parse_scontrol(text: str) -> dict[str, str]:
    """`scontrol -o show job` prints one line of Key=Value pairs (values may hold '=' but no spaces,
    except a few like Command/WorkDir which come last or are irrelevant here)."""
    out: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep:
            out[key] = value
    return out


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
        job_id = run.record["job_id"]
        proc = _run(["scontrol", "-o", "show", "job", str(job_id)])
        if proc.returncode != 0:
            # Gone from slurmctld's memory (older than MinJobAge) and no accounting to ask.
            return JobState("UNKNOWN", reason=proc.stderr.strip())
        f = parse_scontrol(proc.stdout.splitlines()[0])
        code = f.get("ExitCode", "")
        exit_code = None
        if code:
            status, _, sig = code.partition(":")
            exit_code = int(status) if status.isdigit() else None
            if sig.isdigit() and int(sig):
                exit_code = 128 + int(sig)
        return JobState(state=f.get("JobState", "UNKNOWN"), exit_code=exit_code,
                        reason=f.get("Reason") if f.get("Reason") not in (None, "None") else None,
                        nodes=f.get("NodeList") if f.get("NodeList") not in (None, "(null)") else None,
                        elapsed=f.get("RunTime"), restarts=int(f.get("Restarts", "0") or 0), extra=f)

    def cancel(self, run: Run) -> None:
        self.abort(run.record["job_id"])

    def abort(self, job_id: str) -> None:
        proc = _run(["scancel", str(job_id)])
        if proc.returncode != 0:
            raise HpctrainError(f"scancel {job_id} failed: {proc.stderr.strip()}")

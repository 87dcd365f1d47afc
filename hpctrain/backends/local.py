"""This machine, no scheduler: the job script runs detached in its own session."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from ..errors import HpctrainError
from ..runs import Run
from .base import JobState


def _start_time(pid: int) -> str | None:
    """The kernel's start time of a process: tells a live job from a reused pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else fields[19]  # a zombie has ended
    except (OSError, IndexError):
        return None


class LocalBackend:
    name = "local"
    script_name = "job.sh"

    def submit_command(self, script: Path) -> list[str]:
        return ["bash", str(script)]

    def submit(self, run: Run, script: Path) -> str:
        log = open(run.path / "logs" / "job.out", "ab")
        try:
            proc = subprocess.Popen(self.submit_command(script), stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise HpctrainError(f"could not start the job: {exc}") from None
        finally:
            log.close()
        run.update(pid=proc.pid, pid_start=_start_time(proc.pid), submitted_ts=time.time())
        return f"local-{proc.pid}"

    def _alive(self, run: Run) -> bool:
        rec = run.record
        pid = rec.get("pid")
        return bool(pid) and _start_time(pid) == rec.get("pid_start") is not None

    def state(self, run: Run) -> JobState:
        exit_file = run.path / "status" / "exit_code"
        rec = run.record
        if exit_file.exists():
            text = exit_file.read_text().strip()
            code = int(text) if text.lstrip("-").isdigit() else None
            if rec.get("cancelled"):
                return JobState("CANCELLED", exit_code=code)
            return JobState("COMPLETED" if code == 0 else "FAILED", exit_code=code)
        if self._alive(run):
            return JobState("RUNNING", nodes=os.uname().nodename,
                            elapsed=_elapsed(rec.get("submitted_ts")))
        if rec.get("cancelled"):
            return JobState("CANCELLED")
        return JobState("LOST", reason="the job's process is gone without an exit status")

    def abort(self, job_id: str) -> None:
        try:
            os.killpg(int(job_id.split("-")[-1]), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass

    def cancel(self, run: Run, grace: float = 10.0) -> None:
        run.update(cancelled=True)
        if not self._alive(run):
            return
        pid = run.record["pid"]
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self._alive(run):
            time.sleep(0.1)
        if self._alive(run):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _elapsed(start: float | None) -> str | None:
    if not start:
        return None
    s = int(time.time() - start)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"

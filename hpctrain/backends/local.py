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
from .summary import fmt_elapsed, summarise


def _start_time(pid: int) -> str | None:
    """The kernel's start time of a process: tells a live job from a reused pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else fields[19]  # a zombie has ended
    except (OSError, IndexError):
        return None


def recorded_process_alive(record: dict) -> bool:
    """Whether run.json's pid is still the process that was started (not a reused pid)."""
    pid = record.get("pid")
    return bool(pid) and _start_time(pid) is not None and _start_time(pid) == record.get("pid_start")


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
        return recorded_process_alive(run.record)

    def state(self, run: Run) -> JobState:
        rec = run.record
        alive = self._alive(run)
        size = rec.get("array_size")
        if size:
            tasks = [self._task_state(run.path / "tasks" / str(i), alive, rec.get("cancelled"),
                                      f"{rec['job_id']}_{i}") for i in range(size)]
            return summarise(str(rec["job_id"]), tasks)
        st = self._task_state(run.path, alive, rec.get("cancelled"), str(rec["job_id"]))
        if st.state == "RUNNING":
            st.elapsed = fmt_elapsed(time.time() - rec["submitted_ts"]) if rec.get("submitted_ts") else None
        return st

    @staticmethod
    def _task_state(d: Path, alive: bool, cancelled, job: str) -> JobState:
        exit_file = d / "status" / "exit_code"
        if exit_file.exists():
            text = exit_file.read_text().strip()
            code = int(text) if text.lstrip("-").isdigit() else None
            # Ended after the cancel (whatever its status: torchrun may exit 0 on SIGTERM).
            if cancelled and exit_file.stat().st_mtime >= float(cancelled) - 1:
                return JobState("CANCELLED", exit_code=code, job=job)
            return JobState("COMPLETED" if code == 0 else "FAILED", exit_code=code, job=job)
        started = (d / "logs" / "job.out").exists()
        if alive:
            return JobState("RUNNING" if started else "PENDING", nodes=os.uname().nodename if started else None,
                            reason=None if started else "JobArrayTaskLimit", job=job)
        if cancelled:
            return JobState("CANCELLED", job=job)
        return JobState("LOST", reason="the job's process is gone without an exit status", job=job)

    def abort(self, job_id: str) -> None:
        try:
            os.killpg(int(job_id.split("-")[-1]), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass

    def cancel(self, run: Run, grace: float = 10.0) -> None:
        """SIGTERM to the job's process group (torchrun passes it on to the ranks), SIGKILL to
        whatever is left after `grace` — including the ranks, which torchrun starts in sessions
        of their own and so are not in the job's process group."""
        run.update(cancelled=time.time())  # when: tasks that ended before it keep their state
        pid = run.record.get("pid")
        if not self._alive(run):
            _kill_ranks(run.path, signal.SIGKILL)
            return
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and (self._alive(run) or _live_ranks(run.path)):
            time.sleep(0.1)
        if self._alive(run):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _kill_ranks(run.path, signal.SIGKILL)


def _live_ranks(run_dir: Path) -> list[int]:
    """Pids of this run's ranks that still run (checked by their environment, not just the pid,
    which the kernel may have reused)."""
    import json
    pids = []
    for path in list(run_dir.glob("status/rank-*.json")) + list(run_dir.glob("tasks/*/status/rank-*.json")):
        try:
            pid = int(json.loads(path.read_text())["pid"])
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except (OSError, ValueError, KeyError):
            continue
        want = f"HPCTRAIN_RUN_DIR={path.parent.parent}".encode()
        if want in env and _start_time(pid) is not None:
            pids.append(pid)
    return pids


def _kill_ranks(run_dir: Path, sig: int) -> None:
    for pid in _live_ranks(run_dir):
        try:
            os.killpg(pid, sig)  # the rank leads its own session: this takes its tee and workers too
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

"""This machine, no scheduler: the job script runs detached in its own session.

Templates: templates/local/ (torchrun --standalone, no directives; a sweep runs its tasks here,
K at a time). The job script writes status/exit_code when it ends; that file and whether the
recorded process still lives are the whole state.
"""
from __future__ import annotations

import itertools
import json
import os
import signal
import time
from pathlib import Path

from ..errors import HpctrainError
from typing import TYPE_CHECKING

from ..runs.records import Run
from ..rank.end.ending import signal_ranks
from ..runs.untrusted import MAX_COUNT, MAX_SMALL, read_text

if TYPE_CHECKING:
    from ..rank.records import RunRecord
from .base import Backend, JobState, State
from .summary import fmt_elapsed, summarise


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of a process (its clock ticks since boot, as /proc says it), or
    None when it has ended: recorded beside a pid, it tells a live job from a reused pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else fields[19]  # a zombie has ended
    except (OSError, IndexError):
        return None


def recorded_process_alive(record: RunRecord) -> bool:
    """Whether run.json's pid is still the process that was started (not a reused pid)."""
    pid = record.pid
    return bool(pid) and process_start_time(pid) is not None and process_start_time(pid) == record.pid_start


def _stopped(d: Path) -> str | None:
    """status/stopped.json's message: the job ended on a signal and says what was saved
    (rank/end/ending.py); None when it did not."""
    path = d / "status" / "stopped.json"
    try:  # a regular file, bounded: never a FIFO's wait
        message = json.loads(read_text(path, 65536)).get("message")
    except (OSError, ValueError, AttributeError):
        return None
    return " ".join(message.split())[:500] if isinstance(message, str) else None


def _exit_status(d: Path) -> int | None:
    try:
        text = read_text(d / "status" / "exit_code", MAX_SMALL).strip()  # a regular file only
    except OSError:
        return None
    return int(text) if text.lstrip("-").isdigit() and len(text) <= 4 else 1


class LocalBackend(Backend):
    name = "local"
    script_name = "job.sh"
    max_nodes = 1
    no_spares = "this machine is the only node"
    studies = True  # each worker a process here
    runs_here = True  # submit checks this machine's GPUs (job/checks.check_local_gpus)
    # The state is a file and a process here: read 5 times a second, the end is seen at once.
    poll = (0.2, 0.2)
    container_runtimes = ("apptainer", "singularity", "podman", "docker")  # pyxis needs srun

    def submit_command(self, script: Path, plan=None) -> list[str]:
        return ["bash", str(script)]

    @classmethod
    def job_gpus(cls, job):
        """Every GPU nvidia-smi lists here that CUDA_VISIBLE_DEVICES leaves (a job may be
        given any of them)."""
        from ..rank.before.gpu_models import local_names
        from .base import JobGpus
        names, said = local_names(visible=os.environ.get("CUDA_VISIBLE_DEVICES"))
        return JobGpus("this machine", names, said)

    # `hpctrain shell`: a shell here with the job's environment; `hpctrain launch` in it runs
    # the job script itself in the foreground (templates/local/launch.sh.j2 is job.sh.j2).
    shell_roots = ("shell.sh.j2", "launch.sh.j2")

    def shell_command(self, plan, rcfile: Path, record: Path) -> list[str]:
        # The shell's own pid names it ("local-PID", as a job here is named): `launch` checks
        # that it runs under that shell.
        return ["bash", "-c", 'printf "local-%s\\n" "$$" >"$1" && shift && exec "$@"',
                "hpctrain-shell", str(record), "bash", "--rcfile", str(rcfile), "-i"]

    def inside(self, job_id: str) -> bool:
        return under(job_id.rpartition("-")[2])

    # `hpctrain attach` (follow/attach.py): the job runs on this machine, so its one node is
    # this one, under the name its ranks record (rank/before/bootstrap.py: the host name).
    def job_nodes(self, run: Run) -> list[str]:
        import socket
        return [socket.gethostname()] if self.state(run).state == State.RUNNING else []

    def attach_command(self, run: Run, node: str) -> list[str]:
        return ["bash", "-c", 'cd "$1" 2>/dev/null; exec bash -i', "hpctrain-attach",
                str(run.path)]

    def on_nodes(self, run: Run, command: list[str]) -> str:
        import subprocess
        try:
            proc = subprocess.run(command, capture_output=True, stdin=subprocess.DEVNULL,
                                  timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HpctrainError(f"could not run {command[0]} for run {run.id}: "
                                f"{getattr(exc, 'strerror', None) or exc}",
                                fix=f"check that the job still runs: hpctrain status {run.id}"
                                ) from None
        out = proc.stdout.decode("utf-8", errors="replace")
        if proc.returncode != 0:
            said = proc.stderr.decode("utf-8", errors="replace").strip().splitlines()[-1:] or ["-"]
            raise HpctrainError(f"the stack request for run {run.id} failed (exit "
                                f"{proc.returncode}): {said[0][:300]}",
                                fix="check the job's interpreter (the job's python:) on this "
                                "machine")
        return out

    def submit(self, run: Run, prep) -> str:
        import subprocess
        from ..rank.records import open_append
        path = run.path / "logs" / "job.out"
        try:  # an existing run's (submit --resume): never through a link planted there
            log = open_append(str(path), str(run.path))
        except OSError as exc:
            raise HpctrainError(f"cannot write {path}: {exc.strerror or exc}",
                                fix="remove what is there (hpctrain writes its own log)") from None
        try:
            proc = subprocess.Popen(self.submit_command(run.path / prep.script_name), stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise HpctrainError(f"could not start the job: {exc}") from None
        finally:
            log.close()
        run.update(pid=proc.pid, pid_start=process_start_time(proc.pid), submitted_ts=time.time())
        return f"local-{proc.pid}"

    def resubmit(self, run: Run, exclude: list[str]) -> str:
        import types
        # The ended job's exit status and cancel would be read as the new job's.
        (run.path / "status" / "exit_code").unlink(missing_ok=True)
        run.update(cancelled=None)
        return self.submit(run, types.SimpleNamespace(script_name=self.script_name))  # one machine

    def adopt(self, run: Run) -> str | None:
        """The job script writes its own pid (status/pid) as its first act."""
        try:
            pid = int(read_text(run.path / "status" / "pid", MAX_SMALL).split()[0])
        except (OSError, ValueError, IndexError):
            return None
        if not is_job_shell(pid, run.path / self.script_name):
            return None  # gone, another process's pid now, or a pid that was never the job's
        run.update(pid=pid, pid_start=process_start_time(pid))
        return f"local-{pid}"

    def states(self, runs: list[Run]) -> list[JobState]:
        return [self._state(run) for run in runs]

    def _state(self, run: Run) -> JobState:
        rec = run.record
        alive = recorded_process_alive(rec)
        if rec.array_size:
            tasks = [self.task_state(run.path / "tasks" / str(i), alive, rec.cancelled,
                                     f"{rec.job_id}_{i}") for i in range(rec.array_size)]
            return summarise(str(rec.job_id), tasks)
        st = self.task_state(run.path, alive, rec.cancelled, str(rec.job_id))
        if st.state == State.RUNNING and rec.submitted_ts:
            st.elapsed = fmt_elapsed(time.time() - rec.submitted_ts)
        return st

    @staticmethod
    def task_state(d: Path, alive: bool, cancelled: float | None, job: str) -> JobState:
        """The state of a run directory (or a sweep task's) from what it left there: its exit
        status, status/stopped.json, its log; `alive`: whether the run's process still is. The
        ssh backend's runs leave the same files."""
        code = _exit_status(d)
        if code is not None:
            # Ended after the cancel (whatever its status: torchrun may exit 0 on SIGTERM).
            ended = (d / "status" / "exit_code").stat().st_mtime
            stopped = _stopped(d) if code != 0 else None
            if cancelled and ended >= cancelled - 1:
                return JobState(State.CANCELLED, exit_code=code, job=job, raw="cancelled",
                                reason=stopped and f"stopped {stopped}")
            if stopped:
                return JobState(State.STOPPED, exit_code=code, job=job, raw="stopped",
                                reason=stopped)
            if code == 0:
                return JobState(State.COMPLETED, exit_code=0, job=job, raw="exited")
            return JobState(State.FAILED, exit_code=code, job=job, raw="exited")
        started = (d / "logs" / "job.out").exists()
        if alive:
            if started:
                return JobState(State.RUNNING, nodes=os.uname().nodename, job=job, raw="running")
            return JobState(State.PENDING, reason="waiting for a free slot (sweep.parallel)",
                            job=job, raw="waiting")
        if cancelled:
            return JobState(State.CANCELLED, job=job, raw="cancelled")
        return JobState(State.LOST, reason="the job's process is gone without an exit status",
                        job=job, raw="gone")

    def abort(self, job_id: str) -> None:
        try:
            os.killpg(int(job_id.split("-")[-1]), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass

    def cancel(self, run: Run, grace: float = 10.0) -> None:
        """SIGTERM to the job's process group (torchrun passes it on to the ranks), SIGKILL to
        whatever is left after `grace` — including the ranks, which torchrun starts in sessions
        of their own and so are not in the job's process group."""
        rec = run.update(cancelled=time.time())  # when: tasks that ended before it keep their state
        if not (recorded_process_alive(rec) and is_job_shell(rec.pid, run.path / self.script_name)):
            # No job shell (or a record naming a process that is not it): only what carries
            # the run's identity in its environment.
            signal_ranks(processes_of(run.path), signal.SIGKILL)
            return
        try:
            os.killpg(rec.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and processes_of(run.path):
            time.sleep(0.1)
        if recorded_process_alive(rec) and is_job_shell(rec.pid, run.path / self.script_name):
            try:
                os.killpg(rec.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        signal_ranks(processes_of(run.path), signal.SIGKILL)

    def output_files(self, run: Run, task: int | None = None) -> list[Path]:
        if task is None and run.record.array_size:
            return sorted(run.path.glob("tasks/*/logs/job.out"),
                          key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else -1)
        d = run.path if task is None else run.path / "tasks" / str(task)
        return [d / "logs" / "job.out"]


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
    except OSError:
        return []


def _session(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[3])  # state ppid pgrp session
    except (OSError, IndexError, ValueError):
        return None


def is_job_shell(pid: int, script: Path) -> bool:
    """Whether `pid` is verifiably this run's job shell: `bash RUN/job.sh` (the exact command
    submit starts, not an editor or a `tail` naming the file) leading a session of its own (submit
    starts it so). A pid read from a record (run.json, status/pid) is signalled only then."""
    argv = _argv(pid)
    return (len(argv) == 2 and os.path.basename(argv[0]) == "bash" and argv[1] == str(script)
            and _session(pid) == pid and process_start_time(pid) is not None)


def processes_of(run_dir: Path) -> list[int]:
    """Every live process of this run, found by the run's identity in its environment
    (HPCTRAIN_RUN_DIR: torchrun, the ranks and what they start) or by its session (the job
    shell and what it started without a session of its own, when the recorded job shell is
    verifiably the run's): what cancel stops even when no pid was recorded. Never a process
    that merely names the run directory (a `tail -f` of its log, an editor on a file in it)."""
    # A sweep's tasks, a study's trials (hpctrain/search/): each a run directory of its own.
    dirs = [run_dir, *itertools.islice(itertools.chain(run_dir.glob("tasks/*"),
                                                       run_dir.glob("trials/*")), MAX_COUNT)]
    mine = {f"HPCTRAIN_RUN_DIR={d}".encode() for d in dirs}
    sessions = set()
    for d in dirs:
        try:  # a regular file, bounded: a FIFO at status/pid must not hang cancel
            pid = int(read_text(d / "status" / "pid", MAX_SMALL).split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if is_job_shell(pid, d / "job.sh"):
            sessions.add(pid)
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = set(f.read().split(b"\0"))
        except OSError:
            env = set()
        if env & mine or (sessions and _session(pid) in sessions):
            if process_start_time(pid) is not None:
                pids.append(pid)
    return pids


def under(shell: str) -> bool:
    """Whether this process descends from the process `shell` (a pid) of this machine: the
    interactive shell that `launch` must run in."""
    pid = os.getpid()
    while pid > 1:
        if str(pid) == shell:
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False

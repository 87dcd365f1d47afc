"""The one way hpctrain runs a scheduler's command-line tools (sbatch, squeue, scancel, ...).

A command that is missing, hangs or fails raises SchedulerError naming the command, its exit
status and what it printed on stderr; the caller decides how to degrade (`status` says "cannot
reach Slurm: …", `submit` says "sbatch refused the job: …"). Nothing here swallows a failure.
"""
from __future__ import annotations

from ..errors import HpctrainError


class SchedulerError(HpctrainError):
    """A scheduler command could not run, or exited non-zero."""

    def __init__(self, command: list[str], status: int | None, stderr: str, what: str | None = None,
                 fix: str | None = None):
        self.command, self.status, self.stderr = command, status, stderr.strip()
        shown = " ".join(command)
        if what is None:
            what = (f"'{shown}' exited {status}: {self.stderr or '(nothing on stderr)'}"
                    if status is not None else f"'{shown}': {self.stderr}")
        super().__init__(what, fix=fix)


def run(command: list[str], timeout: float = 60, input: str | None = None) -> str:
    """Run a scheduler command; return its standard output, or raise SchedulerError."""
    import subprocess
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              input=input, stdin=None if input is not None else subprocess.DEVNULL)
    except FileNotFoundError:
        raise SchedulerError(command, None, f"'{command[0]}' is not installed here",
                             fix="run hpctrain where the scheduler's tools are (a login node), "
                             "or choose another site with --site") from None
    except subprocess.TimeoutExpired:
        raise SchedulerError(command, None, f"no answer within {timeout:.0f} s (is the "
                             "scheduler's controller up?)") from None
    except OSError as exc:
        raise SchedulerError(command, None, str(exc)) from None
    if proc.returncode != 0:
        raise SchedulerError(command, proc.returncode, proc.stderr or proc.stdout)
    return proc.stdout

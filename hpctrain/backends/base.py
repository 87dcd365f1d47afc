"""The protocol every backend implements, and the state it reports."""
from __future__ import annotations

import msgspec
from pathlib import Path
from typing import Protocol

from ..runs import Run

# Slurm's job states that mean the job will not run again by itself.
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE", "LOST"}


class JobState(msgspec.Struct):
    state: str  # Slurm's words: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, ...
    exit_code: int | None = None
    reason: str | None = None  # why pending, or why it failed
    nodes: str | None = None
    elapsed: str | None = None
    restarts: int = 0
    extra: dict = msgspec.field(default_factory=dict)
    job: str | None = None  # the scheduler's name for it: 1234, 1234_5, local-4321
    tasks: list["JobState"] = msgspec.field(default_factory=list)  # an array's tasks, by index

    @property
    def done(self) -> bool:
        return self.state in FINAL


class Backend(Protocol):
    name: str
    script_name: str  # the script's file name in the run directory

    def submit_command(self, script: Path) -> list[str]:
        """The command line that submits the script (what --dry-run shows)."""

    def submit(self, run: Run, script: Path) -> str:
        """Submit; return the job id. Raise HpctrainError with the scheduler's message."""

    def state(self, run: Run) -> JobState:
        ...

    def cancel(self, run: Run) -> None:
        ...

    def abort(self, job_id: str) -> None:
        """Cancel by id alone: for a job whose run could not be recorded."""

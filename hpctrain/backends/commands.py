"""The one way hpctrain runs a scheduler's command-line tools (sbatch, squeue, scancel, ...).

A command that is missing, hangs or fails raises SchedulerError naming the command, its exit
status and what it printed on stderr; the caller decides how to degrade (`status` says "cannot
reach Slurm: …", `submit` says "sbatch refused the job: …"). Nothing here swallows a failure.

Where they run: here, or — inside `on(login)` — on a login node over ssh (remote.Login: one
shared connection, every word quoted for the remote shell). The backends' code is the same for
both; only this function knows the difference.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

from ..errors import HpctrainError

# The login node the scheduler's tools run on in this context (an object with .tool(command,
# timeout, input) -> stdout), or None: here. A context variable, so that threads and notebook
# cells that talk to two clusters at once do not mix them up.
_where: ContextVar = ContextVar("hpctrain_scheduler_host", default=None)


@contextmanager
def on(login):
    """Run the scheduler's tools on `login` (None: here) inside the block."""
    token = _where.set(login)
    try:
        yield
    finally:
        _where.reset(token)


def where():
    """The login node the tools run on now, or None."""
    return _where.get()


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
    """Run a scheduler command; return its standard output, or raise SchedulerError. Its output
    is read bounded (rank/tools.py: a tool that prints without end is stopped at the cap)."""
    import subprocess
    from ..rank import tools
    login = _where.get()
    if login is not None:
        return login.tool(command, timeout=timeout, input=input)
    try:
        proc = tools.run(command, timeout=timeout,
                         input=input.encode("utf-8") if input is not None else None)
    except FileNotFoundError:
        raise SchedulerError(command, None, f"'{command[0]}' is not installed here",
                             fix="run hpctrain where the scheduler's tools are (a login node), "
                             "or choose another site with --site") from None
    except subprocess.TimeoutExpired:
        raise SchedulerError(command, None, f"no answer within {timeout:.0f} s (is the "
                             "scheduler's controller up?)") from None
    except OSError as exc:
        raise SchedulerError(command, None, str(exc)) from None
    stdout = proc.stdout.decode("utf-8", errors="replace")
    if proc.returncode != 0:
        raise SchedulerError(command, proc.returncode,
                             proc.stderr.decode("utf-8", errors="replace") or stdout[:65536])
    return stdout

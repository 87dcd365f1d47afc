"""`hpctrain shell` and `hpctrain launch`: the job's own launch, interactively.

`shell` writes the run directory as `submit` does (job.yaml, the code snapshot, rank/,
bootstrap.json, the job script for reference) and beside it the shell's rcfile and the
interactive launch, rendered from the scheduler's templates with the job script's own parts
(templates/<scheduler>/shell.sh.j2, launch.sh.j2). Then the backend's shell command runs in the
foreground: on Slurm an allocation with the job's resources and directives and bash on its first
node (through the site's login host, over ssh with a terminal, when it has one), on the local
site bash here, each with the job's environment. `launch`, typed in that
shell, runs the launch script: each time one attempt in the same run directory. Leaving the
shell releases the allocation; so does a hang-up of the terminal, and this process ending in any
way (its child gets SIGHUP from the kernel).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import msgspec

from .backends import backend, backend_class
from .errors import HpctrainError
from .job.load import Job
from .rendering.templates import render_plan
from .runs.records import Run, find, write_atomic

RCFILE = "shell.rc"  # the shell's rcfile in the run directory
LAUNCH = "launch.sh"  # the interactive launch
ALLOCATION = "status/allocation"  # the allocation's job id, written before the shell starts


def prepare_shell(job: Job, run_id: str | None = None):
    """(prepared submission, rcfile text, launch text) for an interactive allocation."""
    from .job.checks import check_secrets
    from .submission import prepare
    if job.tasks:
        raise HpctrainError("hpctrain shell runs one job, not a sweep", job.source,
                            "pick one configuration: --set the swept key to one value")
    check_secrets(job)
    prep = prepare(job, run_id)
    roots = backend_class(prep.backend).shell_roots
    if roots is None:
        raise backend(prep.backend).no_interactive("hpctrain shell")
    over_ssh = prep.mirror is not None or not backend_class(prep.backend).shell_takes_secrets
    if over_ssh and prep.plan.secrets:
        # submit hands them to the far side on the ssh session's standard input; an interactive
        # session's standard input is the terminal, and a file or an argument would show them
        # to the other users of the machines.
        how = "through its login host" if prep.mirror is not None else "on its hosts"
        raise HpctrainError(f"the job's secrets ({', '.join(prep.plan.secrets)}) cannot reach "
                            f"a shell on site '{job.site.name}' {how}: only submit passes "
                            "them there", job.source,
                            "leave secrets: out for the shell (--set secrets=[]) and export "
                            "them in it before hpctrain launch, or submit the job")
    # An interactive allocation is not requeued and sends no events: the launch has neither.
    plan = msgspec.structs.replace(prep.plan, preemption=None, notify=None)
    return prep, render_plan(plan, [], roots[0]), render_plan(plan, [], roots[1])


def shell(job: Job, say=print) -> int:
    """Get the allocation and run the shell in it; the shell's exit status."""
    from .runs.records import add_to_index
    from .submission import snapshot_source, write_run
    prep, rc_text, launch_text = prepare_shell(job)
    # Here, or through the site's login host (the run directory on the cluster, its mirror here).
    chosen = prep.transport.backend(backend(prep.backend), prep.run_dir)
    far = Path(prep.run_dir)
    source = snapshot_source(prep)
    with write_run(prep, source, extra={"interactive": True}) as run:
        write_atomic(run.path / RCFILE, rc_text, mode=0o644)
        write_atomic(run.path / LAUNCH, launch_text, mode=0o755)
    try:  # what the run needs where the shell runs (through a login host: copied there)
        chosen.stage(run, prep)
    except HpctrainError as exc:
        run.update(state="FAILED", final=True, reason=f"the shell did not start: {exc}")
        raise
    command = chosen.shell_command(prep.plan, far / RCFILE, far / ALLOCATION)
    say(f"shell {prep.job.spec.name}  run {run.id}  on {prep.job.site.name}")
    say(f"run directory: {far}" + (f" (on the cluster; here: {run.path})" if far != run.path else ""))
    sys.stdout.flush()
    status = _foreground(command, _Recorder(run, chosen, remote=prep.mirror is not None))
    if prep.mirror is not None:
        _fetch(run, chosen)
    job_id = _allocation(run)
    if job_id is None:
        run.update(state="FAILED", final=True, reason="no allocation was granted")
        raise HpctrainError(f"no allocation was granted (the shell command exited {status}): "
                            "the scheduler's message is above",
                            fix="check the job's partition, account, nodes and time against the "
                            "site (sinfo); hpctrain submit JOB --dry-run shows its directives")
    if run.record.job_id != job_id:
        run.update(job_id=job_id, state="SUBMITTED", **chosen.shell_record(run))
        add_to_index(run)
    say(f"shell ended (status {status}); its run stays: hpctrain logs {run.id}")
    return status


def _foreground(command: list[str], tick) -> int:
    """Run the allocation command with this terminal. Ctrl-C is the command's (salloc gives up
    a pending request); TERM or HUP to this process is passed on as SIGHUP, on which salloc
    releases the allocation; this process killed outright, the kernel sends the child SIGHUP
    (PR_SET_PDEATHSIG). tick() runs every half second until the command ends."""
    proc = subprocess.Popen(command, preexec_fn=_hang_up_with_parent)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: proc.send_signal(signal.SIGHUP))
    try:
        while True:
            try:
                return proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                tick()
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _hang_up_with_parent() -> None:
    import ctypes
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGHUP)


def _allocation(run: Run) -> str | None:
    """The allocation's job id the shell command wrote (data: checked by the backend's pattern)."""
    import re
    from .runs.untrusted import read_text
    try:  # (a run directory is shared: a pipe or a huge file there must not hang or fill memory)
        text = read_text(run.path / ALLOCATION, limit=256).strip()
    except OSError:
        return None
    pattern = backend_class(run.record.backend).job_id_pattern
    return text if re.fullmatch(pattern, text) else None


class _Recorder:
    """Once the allocation is granted: its job id in run.json and the index (status, attach).
    Through a login host the id is written on the cluster: fetched every few seconds until
    it is here."""

    def __init__(self, run: Run, chosen, remote: bool):
        self.run, self.chosen, self.remote = run, chosen, remote
        self.fetched = 0.0

    def __call__(self) -> None:
        import time
        from .runs.records import add_to_index
        if self.run.record.job_id is not None:
            return
        if self.remote:
            if time.monotonic() - self.fetched < 5:
                return
            self.fetched = time.monotonic()
            _fetch(self.run, self.chosen)
        job_id = _allocation(self.run)
        if job_id is not None:
            self.run.update(job_id=job_id, state="SUBMITTED", **self.chosen.shell_record(self.run))
            add_to_index(self.run)


def _fetch(run: Run, chosen) -> None:
    """The cluster's files of the run into its mirror here; a failure is left for later (the
    shell goes on; status fetches again)."""
    from .backends.commands import SchedulerError
    try:
        chosen.fetch(run)
    except SchedulerError:
        pass


def launch(ref: str | None) -> None:
    """`hpctrain launch` in the shell: run its launch script (never returns)."""
    ref = ref or os.environ.get("HPCTRAIN_RUN_DIR")
    if not ref:
        raise HpctrainError("hpctrain launch runs in the shell of `hpctrain shell JOB`",
                            fix="hpctrain shell JOB, then type hpctrain launch there")
    run = find(ref)
    if not run.record.extra.get("interactive") or not (run.path / LAUNCH).is_file():
        raise HpctrainError(f"run {run.id} is not an interactive allocation's run",
                            fix="hpctrain shell JOB, then type hpctrain launch there")
    job_id = _allocation(run)
    chosen = backend(run.record.backend)
    if job_id is None or not chosen.inside(job_id):
        raise HpctrainError(f"hpctrain launch runs inside run {run.id}'s shell"
                            + (f" (job {job_id})" if job_id else ""),
                            fix="type it in the shell that hpctrain shell opened")
    sys.stdout.flush()
    os.execvp("bash", ["bash", str(run.path / LAUNCH)])

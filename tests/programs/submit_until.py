"""`hpctrain submit ARGS...` in this process, killed (SIGKILL) — or with a write that fails — at a
chosen point of the submission: what kill -9, the OOM killer or a full disk do there.

    python tests/programs/submit_until.py POINT [submit arguments...]

POINT: before-record, after-record, after-index, after-files, after-start, after-job-id (SIGKILL
there) or fail-record (the write of the job id raises ENOSPC). The patches are this test
program's own, applied from outside: hpctrain has no switch for them.
"""
import errno
import os
import signal
import subprocess
import sys

import hpctrain.backends.commands as commands
import hpctrain.submission as submission
from hpctrain.rank.records import RunRecord
from hpctrain.runs.records import Run


def die():
    os.kill(os.getpid(), signal.SIGKILL)


def wrap(owner, name, before=None, after=None, when=lambda *a, **k: True):
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        hit = when(*args, **kwargs)
        if hit and before:
            before()
        result = original(*args, **kwargs)
        if hit and after:
            after()
        return result
    setattr(owner, name, wrapper)


def full_disk():
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "run.json")


def main() -> int:
    point, argv = sys.argv[1], sys.argv[2:]
    job_id_write = lambda self, **fields: "job_id" in fields  # noqa: E731
    if point == "before-record":
        wrap(RunRecord, "save", before=die)
    elif point == "after-record":
        wrap(RunRecord, "save", after=die)
    elif point == "after-index":
        wrap(submission, "add_to_index", after=die)
    elif point == "after-files":
        wrap(submission, "_write_job_dir", after=die)
    elif point == "after-start":  # sbatch answered, or the local job's process started
        wrap(commands, "run", after=die, when=lambda cmd, *a, **k: cmd[0] == "sbatch")
        wrap(subprocess, "Popen", after=die, when=lambda cmd, *a, **k: cmd[0] == "bash")
    elif point == "after-job-id":
        wrap(Run, "update", after=die, when=job_id_write)
    elif point == "fail-record":
        wrap(Run, "update", before=full_disk, when=job_id_write)
    else:
        raise SystemExit(f"unknown point {point}")
    from hpctrain.cli import main as cli
    return cli(["submit", *argv])


if __name__ == "__main__":
    sys.exit(main())

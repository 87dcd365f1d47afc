"""Run directories: create one, record what was submitted, find it again from anywhere.

    runs/<job name>/<run id>/
        job.yaml        the resolved job (defaults filled in)
        job.sbatch      the script (job.sh for the local scheduler)
        rank/           the rank side (hpctrain/rank/), run by path from the script
        bootstrap.json  its settings, the program and its arguments
        run.json        ids, site, backend, times, hpctrain version, git commit and dirty flag
        logs/           slurm-<jobid>.out, rank-<R>.log
        status/         rank identities and failures, failure.json, the local backend's exit code

The records' formats are defined in rank/records.py (the ranks write some of them).

An index (one JSON line per run, under $HPCTRAIN_HOME or ~/.local/state/hpctrain) lets
`status`, `logs` and `cancel` find a run by id or Slurm job id from any directory.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from contextlib import contextmanager
import msgspec
from pathlib import Path

from ..errors import HpctrainError
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the records module is read only when a run is (not on render's path)
    from ..rank.records import RunRecord

RECORD = "run.json"


def state_home() -> Path:
    env = os.environ.get("HPCTRAIN_HOME")
    if env:
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "hpctrain"


def index_path() -> Path:
    return state_home() / "runs.jsonl"


def new_run_id(now: _dt.datetime | None = None) -> str:
    now = now or _dt.datetime.now()
    return now.strftime("%Y%m%d-%H%M%S-") + os.urandom(2).hex()


def run_path(runs_dir: str, name: str, run_id: str) -> Path:
    return (Path(runs_dir) / name / run_id).absolute()


def trial_dir(run_dir, number: int) -> Path:
    """Where a study's trial (or a population's member) `number` runs: trials/NNNN under the
    study's run directory (the workers write it; status, logs and report read it)."""
    return Path(run_dir) / "trials" / f"{number:04d}"


def git_state(cwd: str) -> dict:
    """The commit and dirty flag of the code being submitted (None outside a git checkout)."""
    import subprocess
    def git(*args):
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return {"commit": None, "dirty": None}
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


class Run(msgspec.Struct):
    path: Path

    @property
    def record(self) -> RunRecord:
        from ..rank.records import RecordError, RunRecord, build_record
        from .untrusted import Unreadable, check_record, read_regular
        path = self.path / RECORD
        try:
            # A regular file of a bounded size only (a FIFO or /dev/zero must not hang), its
            # values checked like a job file's: run directories are shared, untrusted data.
            data = json.loads(read_regular(path).decode("utf-8"))
            rec = build_record(RunRecord, data, str(path))
        except FileNotFoundError:
            raise HpctrainError(f"{self.path} is not a run directory (no {RECORD})") from None
        except (RecordError, ValueError, RecursionError) as exc:
            what = exc if isinstance(exc, RecordError) else f"{path}: not valid JSON or UTF-8 text"
            raise HpctrainError(f"the run's record is damaged: {what}",
                                fix=f"restore {path} or remove the run directory") from None
        except OSError as exc:
            raise HpctrainError(exc.strerror if isinstance(exc, Unreadable)
                                else f"cannot read {path}: {exc.strerror}",
                                fix=f"{RECORD} must be a regular file hpctrain wrote; restore it "
                                "or remove the run directory") from None
        check_record(rec, path)
        return rec

    def update(self, **fields) -> RunRecord:
        rec = self.record
        for key, value in fields.items():
            setattr(rec, key, value)
        path = self.path / RECORD
        try:  # rank/records.write_json: replaced atomically, never written through a link
            rec.save(str(path))
        except OSError as exc:
            raise HpctrainError(f"cannot write {path}: {exc.strerror or exc}",
                                fix=f"{RECORD} must be a regular file hpctrain wrote, in a "
                                "directory you can write; restore it or remove the run "
                                "directory") from None
        return rec

    @property
    def id(self) -> str:
        return self.path.name


def write_atomic(path: Path, text: str, mode: int | None = None, root=None) -> None:
    """`path`'s text replaced whole (a reader sees the old file or the new one), the one way
    into a run directory (rank/records.replacing): never through a link at `path` or at any
    directory between `root` (default: the file's own directory) and it."""
    from ..rank.records import replacing
    with replacing(str(path), None if root is None else str(root)) as f:
        if mode is not None:
            os.fchmod(f.fileno(), mode)
        f.write(text.encode("utf-8"))


SUBMITTING = ".submitting"  # held locked (flock) by the submit that creates the run


@contextmanager
def creating(path: Path):
    """Make a run directory, held by this process until the block ends; if anything fails
    before then, remove it again. A submit killed outright leaves the directory, its lock free:
    status() then tells an interrupted submission from one in progress."""
    import fcntl
    if path.exists():
        raise HpctrainError(f"run directory {path} already exists", fix="submit again: run ids are unique")
    try:
        path.mkdir(parents=True)
        lock = open(path / SUBMITTING, "w")
    except OSError as exc:
        raise HpctrainError(f"cannot create the run directory {path}: {exc.strerror}",
                            fix="choose a runs_dir (or $HPCTRAIN_RUNS_DIR) where you can write, "
                            "with a shorter path if it is too long") from None
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        yield Run(path)
    except BaseException:
        import shutil
        shutil.rmtree(path, ignore_errors=True)
        try:
            path.parent.rmdir()  # the job's folder, if this was its only run
        except OSError:
            pass
        raise
    finally:
        lock.close()
    try:
        (path / SUBMITTING).unlink()
    except OSError:
        pass


def being_submitted(path: Path) -> bool:
    """Whether a submit is still creating this run (it holds the lock) — as opposed to one
    that was interrupted and left the run without a job."""
    import fcntl
    try:
        with open(path / SUBMITTING) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
    except OSError:
        return False
    return False


def add_to_index(run: Run) -> None:
    rec = run.record
    line = json.dumps({"run_id": run.id, "path": str(run.path), "job_id": rec.job_id,
                       "name": rec.name, "site": rec.site, "submitted": rec.submitted},
                      sort_keys=True)
    idx = index_path()
    try:
        idx.parent.mkdir(parents=True, exist_ok=True)
        with open(idx, "a") as f:  # one short append: atomic enough for concurrent submitters
            f.write(line + "\n")
    except OSError as exc:
        raise HpctrainError(f"cannot record the run in the index {idx}: {exc.strerror}",
                            fix="point $HPCTRAIN_HOME at a writable directory") from None


def indexed() -> list[dict]:
    """Runs in the index, newest last, skipping those whose directory is gone and lines that
    are not an index entry (a damaged line hides no other run)."""
    idx = index_path()
    from .untrusted import read_text
    try:
        text = read_text(idx, 256 << 20)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise HpctrainError(f"cannot read the index of runs {idx}: {exc.strerror}",
                            fix="point $HPCTRAIN_HOME at a directory of hpctrain's") from None
    seen: dict[str, dict] = {}
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("path"), str) \
                and isinstance(entry.get("run_id"), str):
            seen[entry["path"]] = entry
    out = []
    for entry in seen.values():
        try:
            if (Path(entry["path"]) / RECORD).exists():
                out.append(entry)
        except OSError:  # a path too long for this system, say
            continue
    return out


def find(ref: str) -> Run:
    """A run by directory, run id, or Slurm job id (array tasks: 1234_5 finds run 1234)."""
    if not ref.strip():
        raise HpctrainError("an empty RUN names no run",
                            fix="give a run id, a run directory or a job id; `hpctrain list` shows them")
    p = Path(ref)
    try:
        if os.path.lexists(p / RECORD):  # reading it says what is wrong with one (a pipe...)
            return Run(p.absolute())
    except OSError:  # not a path this system can look up (too long): an id, then
        pass
    entries = indexed()
    job_ref = ref.split("_")[0]
    # A whole id or job id first: job 1 of a new cluster must not also match every run id that
    # ends in "1" (the end of a run id is for typing less of it).
    hits = ([e for e in entries if e["run_id"] == ref or str(e.get("job_id")) == job_ref]
            or [e for e in entries if e["run_id"].endswith(ref)])
    if not hits:
        shown = ref if len(ref) <= 80 else ref[:77] + "..."
        raise HpctrainError(f"no run '{shown}' found (looked in {index_path()})",
                            fix="give a run id, a run directory or a Slurm job id; `hpctrain list` shows them")
    if len({e["path"] for e in hits}) > 1:
        raise HpctrainError(f"'{ref[:80]}' matches {len(hits)} runs: "
                            + ", ".join(e["run_id"] for e in hits[:5]), fix="give the whole run id")
    return Run(Path(hits[-1]["path"]))


def latest() -> Run | None:
    entries = indexed()
    return Run(Path(entries[-1]["path"])) if entries else None

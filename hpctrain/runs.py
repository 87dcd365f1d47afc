"""Run directories: create one, record what was submitted, find it again from anywhere.

    runs/<job name>/<run id>/
        job.yaml        the resolved job (defaults filled in)
        job.sbatch      the script (job.sh for the local scheduler)
        bootstrap.py    the per-rank bootstrap (+ cpu_mode.py), called by path from the script
        bootstrap.json  its settings
        run.json        ids, site, backend, times, hpctrain version, git commit and dirty flag
        logs/           slurm-<jobid>.out, rank-<R>.log
        status/         per-rank failure notes, the local backend's exit code

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

from .errors import HpctrainError

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
    # os.urandom, not the secrets module: an id needs no hmac/hashlib on render's import path.
    return now.strftime("%Y%m%d-%H%M%S-") + os.urandom(2).hex()


def run_path(runs_dir: str, name: str, run_id: str) -> Path:
    return (Path(runs_dir) / name / run_id).absolute()


def git_state(cwd: str) -> dict:
    """The commit and dirty flag of the code being submitted (None outside a git checkout)."""
    import subprocess  # here, not at the top: `hpctrain render` never runs git (~2 ms of imports)
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
    def record(self) -> dict:
        try:
            return json.loads((self.path / RECORD).read_text())
        except FileNotFoundError:
            raise HpctrainError(f"{self.path} is not a run directory (no {RECORD})") from None

    def update(self, **fields) -> dict:
        data = self.record
        data.update(fields)
        write_atomic(self.path / RECORD, json.dumps(data, indent=2, sort_keys=True) + "\n")
        return data

    @property
    def id(self) -> str:
        return self.path.name


def write_atomic(path: Path, text: str, mode: int | None = None) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    if mode is not None:
        tmp.chmod(mode)
    os.replace(tmp, path)


@contextmanager
def creating(path: Path):
    """Make a run directory; if anything fails before the block ends, remove it again."""
    if path.exists():
        raise HpctrainError(f"run directory {path} already exists", fix="submit again: run ids are unique")
    path.mkdir(parents=True)
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


def add_to_index(run: Run) -> None:
    rec = run.record
    line = json.dumps({"run_id": run.id, "path": str(run.path), "job_id": rec.get("job_id"),
                       "name": rec.get("name"), "site": rec.get("site"),
                       "submitted": rec.get("submitted")}, sort_keys=True)
    idx = index_path()
    idx.parent.mkdir(parents=True, exist_ok=True)
    with open(idx, "a") as f:  # one short append: atomic enough for concurrent submitters
        f.write(line + "\n")


def indexed() -> list[dict]:
    """Runs in the index, newest last, skipping those whose directory is gone."""
    try:
        lines = index_path().read_text().splitlines()
    except FileNotFoundError:
        return []
    seen: dict[str, dict] = {}
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        seen[entry["path"]] = entry
    return [e for e in seen.values() if (Path(e["path"]) / RECORD).exists()]


def find(ref: str) -> Run:
    """A run by directory, run id, or Slurm job id (array tasks: 1234_5 finds run 1234)."""
    p = Path(ref)
    if (p / RECORD).is_file():
        return Run(p.absolute())
    entries = indexed()
    job_ref = ref.split("_")[0]
    hits = [e for e in entries if e["run_id"] == ref or str(e.get("job_id")) == job_ref
            or e["run_id"].endswith(ref)]
    if not hits:
        raise HpctrainError(f"no run '{ref}' found (looked in {index_path()})",
                            fix="give a run id, a run directory or a Slurm job id; `hpctrain list` shows them")
    if len({e["path"] for e in hits}) > 1:
        raise HpctrainError(f"'{ref}' matches {len(hits)} runs: "
                            + ", ".join(e["run_id"] for e in hits[:5]), fix="give the whole run id")
    return Run(Path(hits[-1]["path"]))


def rank_identity_files(directory: Path) -> list[Path]:
    """status/rank-R.json of every rank that started (not rank-R.failed.json, its failure note)."""
    return sorted(p for p in Path(directory).glob("status/rank-*.json")
                  if p.name[len("rank-"):-len(".json")].isdigit())


def latest() -> Run | None:
    entries = indexed()
    return Run(Path(entries[-1]["path"])) if entries else None

"""Never lose work (issue 12): the code snapshot a job runs and the tracking ids that follow a
run across requeues."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hpctrain.runs import snapshot
from hpctrain.job import preemption as survive
from hpctrain.errors import HpctrainError
from hpctrain.schema.spec import Snapshot

# ----------------------------------------------------------------------------- tracking

def test_tracking_id_is_stable_per_run_and_per_sweep_task():
    one = survive.tracking_env("/r/runs/exp/20260101-abc")
    assert one["WANDB_RUN_ID"] == survive.tracking_env("/r/runs/exp/20260101-abc/")["WANDB_RUN_ID"]
    assert one["WANDB_RUN_ID"] == "20260101-abc" and one["WANDB_RESUME"] == "allow"
    assert one["WANDB_DIR"] == "/r/runs/exp/20260101-abc"
    assert one["HPCTRAIN_TENSORBOARD_DIR"] == "/r/runs/exp/20260101-abc/tensorboard"
    task = survive.tracking_env("/r/runs/exp/20260101-abc/tasks/3")
    assert task["WANDB_RUN_ID"] == "20260101-abc-3"


# ----------------------------------------------------------------------------- snapshot

def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True,
                   env=dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
                            GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t"))


def test_snapshot_of_a_checkout_takes_tracked_changed_and_new_files(tmp_path):
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    (repo / "sub" / "train.py").write_text("v1\n")
    (repo / ".gitignore").write_text("*.log\nruns/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "x")
    (repo / "sub" / "train.py").write_text("v2 uncommitted\n")
    (repo / "sub" / "new.py").write_text("new\n")
    (repo / "sub" / "out.log").write_text("ignored\n")
    (repo / "runs").mkdir()
    (repo / "runs" / "r.txt").write_text("runs dir\n")
    (repo / "secret.bin").write_text("left out\n")
    (repo / ".hpctrainignore").write_text("*.bin\n")
    source = snapshot.collect(str(repo / "sub"), Snapshot(), [str(repo / "runs")])
    assert source.method == "git" and source.dirty and source.rel == "sub"
    assert "sub/train.py" in source.files and "sub/new.py" in source.files
    assert not {"sub/out.log", "runs/r.txt", "secret.bin"} & set(source.files)
    run = tmp_path / "run"
    snapshot.copy(source, run)
    assert (run / "code" / "sub" / "train.py").read_text() == "v2 uncommitted\n"
    assert snapshot.run_workdir(str(run / "code"), str(repo / "sub")) == str(run / "code" / "sub")
    assert "sub/new.py" in (run / snapshot.FILE_LIST).read_text().split()
    record = source.record(run)
    assert record["files"] == len(source.files) and record["method"] == "git"


def test_snapshot_without_git_leaves_out_ignored_and_large_is_refused(tmp_path):
    d = tmp_path / "plain"
    (d / "__pycache__").mkdir(parents=True)
    (d / "__pycache__" / "x.pyc").write_bytes(b"0")
    (d / "train.py").write_text("x\n")
    (d / "data.npy").write_bytes(b"0" * (2 * 1024 * 1024))
    source = snapshot.collect(str(d), Snapshot(), [])
    assert source.method == "directory" and set(source.files) == {"train.py", "data.npy"}
    with pytest.raises(HpctrainError, match="snapshot.max_mb=1") as err:
        snapshot.check_size(source, Snapshot(max_mb=1), "job.yaml:3")
    assert "data.npy" in str(err.value)
    excluded = snapshot.collect(str(d), Snapshot(max_mb=1, exclude=["*.npy"]), [])
    snapshot.check_size(excluded, Snapshot(max_mb=1, exclude=["*.npy"]), None)
    assert excluded.files == ["train.py"]


def test_snapshot_of_a_checkout_leaves_out_a_symlinked_virtualenv(tmp_path):
    """A venv linked into a checkout (`.venv-x -> /elsewhere`) is untracked and not ignored by a
    `.venv*/` line (a link is no directory): following it would copy gigabytes."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text("x\n")
    (repo / ".gitignore").write_text(".venv*/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "x")
    elsewhere = tmp_path / "venv"
    (elsewhere / "lib").mkdir(parents=True)
    (repo / ".venv-ding").symlink_to(elsewhere)
    (repo / "venv").symlink_to(elsewhere)
    source = snapshot.collect(str(repo), Snapshot(), [])
    assert source.files == [".gitignore", "train.py"], source.files

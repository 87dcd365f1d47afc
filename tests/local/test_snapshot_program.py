"""A script the code snapshot does not hold is refused at submit, naming the file, why and the
fix (issue 28, item 4): it used to be accepted, and every rank then failed with FileNotFoundError
for RUN/code/<path>. A real git repository, a real submit (refused before anything starts)."""
from __future__ import annotations

import subprocess

import yaml


def _repo(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scratch").mkdir(parents=True)
    (repo / ".gitignore").write_text("scratch/\n")
    (repo / "scratch" / "train.py").write_text("print('hi')\n")
    (repo / "ok.py").write_text("print('hi')\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", ".gitignore", "ok.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    return repo


def _job(repo, script, **extra):
    path = repo / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "snap", "library": "command", "script": script,
                                    "resources": {"nodes": 1, "time": "00:05:00"}, **extra}))
    return path


def test_a_git_ignored_script_is_refused_with_why_and_the_fix(cli, tmp_path):
    repo = _repo(tmp_path)
    proc = cli("submit", _job(repo, "scratch/train.py"), "--site", "local", check=False, cwd=repo)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "scratch/train.py is not in the code snapshot" in proc.stderr
    assert "git ignores it" in proc.stderr and "snapshot: false" in proc.stderr
    assert "git add -f scratch/train.py" in proc.stderr


def test_a_script_outside_the_snapshot_root_is_refused(cli, tmp_path):
    repo = _repo(tmp_path)
    (tmp_path / "elsewhere.py").write_text("print('hi')\n")
    proc = cli("submit", _job(repo, "../elsewhere.py"), "--site", "local", check=False, cwd=repo)
    assert proc.returncode == 2 and "outside the snapshot's root" in proc.stderr, proc.stderr


def test_dry_run_of_a_held_script_passes_the_check(cli, tmp_path):
    repo = _repo(tmp_path)
    proc = cli("submit", _job(repo, "ok.py"), "--site", "local", "--dry-run", cwd=repo)
    assert proc.returncode == 0

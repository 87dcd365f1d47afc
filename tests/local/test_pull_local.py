"""`hpctrain pull` of a real run on the local site: one tiny run (a stdlib program that leaves
checkpoints, an exported policy, an evaluation record, a video, a TensorBoard event file, links
out of the run and an odd name), pulled whole with its manifest; a copy cut mid-file by killing
rsync, then resumed; a differing file here refused, then replaced on request; links on either
side never followed."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import HPCTRAIN, ROOT, submitted

PROGRAM = ROOT / "tests" / "programs" / "artifacts.py"
EXPORT_MB = 48


@pytest.fixture
def run_dir(cli, tmp_path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not the run's\n")
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "name": "pull-me", "library": "command", "script": str(PROGRAM), "python": sys.executable,
        "args": ["--export-mb", str(EXPORT_MB), "--outside", str(outside)],
        "resources": {"nodes": 1, "procs_per_node": 1}}))
    proc = cli("submit", job, "--site", "local", "--wait", timeout=300)
    assert "COMPLETED" in proc.stdout, proc.stdout + proc.stderr
    return submitted(proc.stdout)[1]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def test_pull_copies_the_artifacts_resumes_a_cut_copy_and_refuses_what_differs(cli, run_dir, tmp_path):
    dest = tmp_path / "laptop" / "got"
    proc = cli("pull", run_dir.name, "--to", dest, "--max-size", "1G")
    assert f"into {dest}" in proc.stdout and "exports/with space.onnx" in proc.stdout, proc.stdout
    got = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    for want in ("exports/policy.onnx", "eval/model_2.json", "videos/play-0.mp4",
                 "tb/events.out.tfevents.1700000000.host.1.0", "checkpoints/model_2.pt",
                 "run.json", "logs/rank-0.log", "hpctrain-pull.json"):
        assert want in got, got
    # The newest checkpoint only; never the links out of the run, nor the code snapshot.
    assert "checkpoints/model_1.pt" not in got
    assert not any(p.startswith(("exports/leak", "videos/outside", "code/", "rank/")) for p in got), got
    assert not any(p.is_symlink() for p in dest.rglob("*"))
    man = json.loads((dest / "hpctrain-pull.json").read_text())
    assert man["run_id"] == run_dir.name
    listed = {f["path"]: f for f in man["files"]}
    assert set(listed) == set(got) - {"hpctrain-pull.json"}
    for path, f in listed.items():
        assert f["size"] == (run_dir / path).stat().st_size and f["sha256"] == sha(run_dir / path), path

    # Too large: refused before anything is copied, saying what it would be.
    refused = cli("pull", run_dir.name, "--to", tmp_path / "small", "--max-size", "10M", check=False)
    assert refused.returncode == 2 and "over --max-size 10.0 MiB" in refused.stderr, refused.stderr
    assert "exports/policy.onnx (48.0 MiB)" in refused.stderr and not (tmp_path / "small").exists()

    # A cut copy: rsync killed partway through the large file, as a dropped connection ends it.
    cut = tmp_path / "cut"
    pulling = subprocess.Popen([*HPCTRAIN, "pull", run_dir.name, "--to", cut, "--only", "exports",
                                "--bwlimit", "12M"], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        part = list((cut / "exports").glob(".policy.onnx.*")) if (cut / "exports").is_dir() else []
        if part and part[0].stat().st_size > 8 << 20:
            break
        time.sleep(0.02)
    else:
        pytest.fail("the copy never got under way")
    rsync = [c for c in children(pulling.pid) if "rsync" in Path(f"/proc/{c}/cmdline").read_text()]
    os.kill(rsync[0], signal.SIGTERM)
    out, err = pulling.communicate(timeout=60)
    assert pulling.returncode == 2 and "the copy was cut" in err and "run the same pull again" in err, err
    kept = cut / "exports" / ".hpctrain-partial" / "policy.onnx"
    assert kept.is_file() and not (cut / "exports" / "policy.onnx").exists()
    arrived = kept.stat().st_size
    again = cli("pull", run_dir.name, "--to", cut, "--only", "exports")
    # Only what had not arrived crosses again (rsync's matched data: the part kept).
    reused = float(again.stdout.split(" sent, ")[1].split(" MiB already here")[0])
    assert reused * (1 << 20) >= arrived - (1 << 20) and arrived > 4 << 20, (again.stdout, arrived)
    assert sha(cut / "exports" / "policy.onnx") == sha(run_dir / "exports" / "policy.onnx")
    assert not (cut / "exports" / ".hpctrain-partial").exists()

    # A file here that differs from the run's and that pull did not write: refused, then replaced.
    (dest / "eval" / "model_2.json").write_text("my own notes\n")
    differ = cli("pull", run_dir.name, "--to", dest, check=False)
    assert differ.returncode == 2 and "differ from the run's" in differ.stderr, differ.stderr
    assert "eval/model_2.json" in differ.stderr and "--overwrite" in differ.stderr
    assert (dest / "eval" / "model_2.json").read_text() == "my own notes\n"
    cli("pull", run_dir.name, "--to", dest, "--overwrite")
    assert sha(dest / "eval" / "model_2.json") == sha(run_dir / "eval" / "model_2.json")

    # A link here where a pulled file or folder would go is never written through.
    outside = tmp_path / "outside-here"
    outside.mkdir()
    (dest / "videos" / "play-0.mp4").unlink()
    os.symlink(outside / "stolen.mp4", dest / "videos" / "play-0.mp4")
    linked = cli("pull", run_dir.name, "--to", dest, "--overwrite", check=False)
    assert linked.returncode == 2 and "is a symbolic link" in linked.stderr, linked.stderr
    assert not (outside / "stolen.mp4").exists()

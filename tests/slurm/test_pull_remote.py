"""`hpctrain pull` from a laptop (issue 52, item 4): a run on the test cluster, submitted from the
`laptop` namespace through the login node's sshd, pulled back to the laptop over that ssh
connection; the copy cut mid-file by killing its ssh connection, then resumed; links in the run
that point out of it not followed."""
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

from tests.conftest import ROOT, submitted
from tests.slurm.test_remote import ON_LAPTOP, far, job, laptop, project, site  # noqa: F401

PROGRAM = ROOT / "tests" / "programs" / "artifacts.py"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                kids = [int(c) for c in (task / "children").read_text().split()]
                out += kids
                todo += kids
        except OSError:
            continue
    return out


def command_of(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


def test_pull_from_laptop_resumes_a_cut_copy(home, site, project, far):  # noqa: F811
    (project / "artifacts.py").write_text(PROGRAM.read_text())
    outside = far / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not the run's\n")
    jf = job(project, "far-pull", script="artifacts.py",
             args=["--export-mb", "64", "--outside", str(outside)])
    proc = laptop("submit", jf.name, "--site", site, "--wait", cwd=project, timeout=400)
    assert "COMPLETED" in proc.stdout, proc.stdout + proc.stderr
    _, mirror = submitted(proc.stdout)
    cluster_dir = far / "far-pull" / mirror.name
    assert (cluster_dir / "exports" / "policy.onnx").stat().st_size == 64 << 20

    # The whole pull: every kind, from the cluster's directory (not the laptop's mirror).
    got = project / "got"
    out = laptop("pull", mirror.name, "--to", got, cwd=project, timeout=300).stdout
    assert "skipped 1 file(s)" in out and "with space.onnx" in out, out
    man = json.loads((got / "hpctrain-pull.json").read_text())
    assert man["from"] == f"login:{cluster_dir}"
    files = {f["path"]: f for f in man["files"]}
    for want in ("exports/policy.onnx", "eval/model_2.json", "videos/play-0.mp4",
                 "checkpoints/model_2.pt", "tb/events.out.tfevents.1700000000.host.1.0"):
        assert files[want]["sha256"] == sha(cluster_dir / want), want
    assert "checkpoints/model_1.pt" not in files
    assert not (got / "exports" / "leak.onnx").exists() and not (got / "videos" / "outside").exists()
    assert not any(p.is_symlink() for p in got.rglob("*"))

    # Cut: the rsync's ssh connection killed partway through the export, as a dropped link ends it.
    cut = project / "cut"
    pulling = subprocess.Popen([str(ON_LAPTOP), sys.executable, "-m", "hpctrain", "pull",
                                mirror.name, "--to", str(cut), "--only", "exports",
                                "--bwlimit", "8M"], cwd=project, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        part = list((cut / "exports").glob(".policy.onnx.*")) if (cut / "exports").is_dir() else []
        if part and part[0].stat().st_size > 8 << 20:
            break
        time.sleep(0.05)
    else:
        pulling.kill()
        pytest.fail("the copy never got under way: " + "".join(pulling.communicate()))
    rsync = [p for p in descendants(pulling.pid) if command_of(p)[:1] == ["rsync"]]
    ssh = [p for p in descendants(rsync[0]) if command_of(p)[:1] == ["ssh"]]
    os.kill(ssh[0], signal.SIGKILL)
    _, err = pulling.communicate(timeout=120)
    assert pulling.returncode == 2 and "run the same pull again" in err, err
    kept = cut / "exports" / ".hpctrain-partial" / "policy.onnx"
    assert kept.is_file() and not (cut / "exports" / "policy.onnx").exists()
    arrived = kept.stat().st_size
    again = laptop("pull", mirror.name, "--to", cut, "--only", "exports", cwd=project,
                   timeout=300).stdout
    reused = float(again.split(" sent, ")[1].split(" MiB already here")[0])
    assert reused * (1 << 20) >= arrived - (1 << 20) and arrived > 4 << 20, (again, arrived)
    assert sha(cut / "exports" / "policy.onnx") == sha(cluster_dir / "exports" / "policy.onnx")

    # A differing file on the laptop is refused, by name.
    (got / "eval" / "model_2.json").write_text("mine\n")
    refused = laptop("pull", mirror.name, "--to", got, cwd=project, check=False)
    assert refused.returncode == 2 and "eval/model_2.json" in refused.stderr, refused.stderr

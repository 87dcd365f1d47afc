"""sync: rsync — hosts without a shared filesystem. Each host gets a directory of its own at the
same path (a bind mount in its own mount namespace, helpers.own_disks); this machine, which
submits, keeps the real one. The run directory and the code are copied to every host before the
launch; logs, notes and results come back."""
from __future__ import annotations

import json
import shutil
import sys

import pytest
import yaml

from tests.conftest import ROOT, read_results, submitted
from tests.ssh.helpers import job_log, lab_site, leftovers, own_disks, status_of, wait_for


@pytest.fixture
def lab_disks(lab, tmp_path):
    """A directory that is, on node5 and node6, each one's own: the code and the runs go there."""
    base = tmp_path / "lab"
    with own_disks(base) as disks:
        yield base, disks


def write_job(base, name="ssh-rsync", **extra) -> tuple:
    code = base / "code"
    code.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "examples" / "ddp_check.py", code / "ddp_check.py")
    doc = {"name": name, "script": "ddp_check.py", "python": sys.executable, "seed": 7,
           "resources": {"nodes": 2, "procs_per_node": 2}, "runs_dir": str(base / "runs"), **extra}
    job = code / "job.yaml"
    job.write_text(yaml.safe_dump(doc))
    return code, job


def test_run_and_code_are_copied_and_the_results_come_back(cli, sites, lab_disks):
    base, disks = lab_disks
    code, job = write_job(base)
    lab_site(sites, "lab-rsync", sync={"mode": "rsync", "code": True})
    proc = cli("submit", job, "--site", "lab-rsync", "--wait", cwd=code, timeout=600)
    job_id, run_dir = submitted(proc.stdout)
    assert "COMPLETED" in proc.stdout, proc.stdout + job_log(run_dir)
    # Each host ran from its own copy: the code and the run directory are on its own disk.
    for host, disk in disks.items():
        assert (disk / "code" / "ddp_check.py").is_file(), host
        assert (disk / "runs" / "ssh-rsync" / run_dir.name / "rank" / "__main__.py").is_file(), host
    node6 = disks["node6"] / "runs" / "ssh-rsync" / run_dir.name
    assert sorted(p.name for p in (node6 / "logs").glob("rank-*.log")) == ["rank-2.log", "rank-3.log"]
    # ... and everything came back here: one run directory, as with a shared filesystem.
    results = read_results(run_dir)
    assert sorted(r["rank"] for r in results) == [0, 1, 2, 3]
    assert {r["allreduce"] for r in results} == {6.0}
    assert [r["host"] for r in sorted(results, key=lambda r: r["rank"])] == ["node5", "node5", "node6", "node6"]
    assert sorted(p.name for p in (run_dir / "logs").glob("rank-*.log")) == [
        "rank-0.log", "rank-1.log", "rank-2.log", "rank-3.log"]
    assert "[rank 3] rank 3/4 on node6" in job_log(run_dir)
    assert "rank 3/4 on node6" in cli("logs", run_dir.name, "--rank", "3").stdout
    record = json.loads((run_dir / "run.json").read_text())
    assert record["ssh"]["sync"] == "rsync" and record["ssh"]["fetched"] is True
    assert status_of(cli, job_id)["state"]["state"] == "COMPLETED"


def test_failure_notes_of_every_host_reach_the_status(cli, sites, lab_disks):
    base, _ = lab_disks
    code, job = write_job(base, name="ssh-rsync-fail")
    failing = code / "fail.py"
    failing.write_text("import os, sys, time\nif os.environ['RANK'] == '2':\n    sys.exit(4)\n"
                       "time.sleep(3600)\n")
    doc = yaml.safe_load(job.read_text())
    doc["script"] = "fail.py"
    job.write_text(yaml.safe_dump(doc))
    lab_site(sites, "lab-rsync", sync={"mode": "rsync", "code": True})
    proc = cli("submit", job, "--site", "lab-rsync", "--wait", cwd=code, check=False, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # Rank 2's note was written on node6's own disk; the head brought it back before summing up.
    assert "failed: rank 2 on node6 exit 4: exit status 4" in proc.stdout
    _, run_dir = submitted(proc.stdout)
    failure = json.loads((run_dir / "status" / "failure.json").read_text())
    assert failure["message"].startswith("rank 2 on node6 failed (exit status 4)"), failure
    assert leftovers(run_dir) == {"node5": [], "node6": []}


def test_cancel_in_rsync_mode(cli, sites, lab_disks):
    base, _ = lab_disks
    code, job = write_job(base, name="ssh-rsync-cancel")
    worker = ROOT / "tests" / "programs" / "worker.py"
    shutil.copy(worker, code / "worker.py")
    doc = yaml.safe_load(job.read_text())
    doc.update(script="worker.py", args=["--seconds", "300"])
    job.write_text(yaml.safe_dump(doc))
    lab_site(sites, "lab-rsync", sync={"mode": "rsync", "code": True})
    _, run_dir = submitted(cli("submit", job, "--site", "lab-rsync", cwd=code).stdout)
    wait_for(lambda: "step 1 of rank 3" in cli("logs", run_dir.name).stdout, 120, "rank 3's output here")
    assert "CANCELLED" in cli("cancel", run_dir.name).stdout
    assert leftovers(run_dir) == {"node5": [], "node6": []}


def test_without_the_code_the_missing_working_directory_is_named(cli, sites, lab_disks):
    base, _ = lab_disks
    code, job = write_job(base, name="ssh-rsync-nocode")
    lab_site(sites, "lab-rsync-nocode", sync="rsync")
    # Without a code snapshot (which travels inside the run directory) and without sync.code.
    proc = cli("submit", job, "--site", "lab-rsync-nocode", "--set", "snapshot=false", cwd=code,
               check=False, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"node5, node6: the working directory {code} (where the job was submitted) is not there" \
        in proc.stderr, proc.stderr
    assert "fix: set the site's sync.code: true" in proc.stderr
    assert not list((base / "runs").rglob("run.json"))

"""What hpctrain reads from Slurm, on whichever release this session's cluster runs: the commands
whose parsers the rest of session B's files (scripts/test-all.sh runs them on the Slurm 24.11
cluster) do not reach — site detect, doctor, a reservation's pending reason, shell and attach —
each once, small. On 22.05 the same paths run in tests/slurm/test_site_detect.py,
test_doctor.py, test_pending.py and test_interactive.py."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest
import yaml

from tests.conftest import ROOT, submitted
from tests.operate_helpers import job_file, status_json
from tests.slurm.survive import wait_until

pytestmark = pytest.mark.slurm

PROMPT = re.compile(r"\[(?P<name>[a-z0-9-]+)\] (?P<host>[a-z]*node\d+):[^\r\n]*[$#] ")


def release() -> str:
    out = subprocess.run(["scontrol", "--version"], capture_output=True, text=True, check=True)
    return out.stdout.split()[-1]


def spawn(*args: str, timeout: float = 60) -> pexpect.spawn:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    child = pexpect.spawn(sys.executable, ["-m", "hpctrain", *args], cwd=str(ROOT), env=env,
                          encoding="utf-8", timeout=timeout, dimensions=(40, 200))
    child.logfile_read = sys.stdout
    return child


def test_site_detect_and_doctor_name_the_release(cli, cluster, tmp_path):
    version = release()
    out = tmp_path / "detected.yaml"
    proc = cli("site", "detect", "detected", "--out", out, "--no-probe")
    doc = yaml.safe_load(out.read_text())
    assert doc["slurm_version"] == version, proc.stdout
    assert doc["limits"]["cpus_per_node"] == 2 and doc["limits"]["max_gpus_per_node"] == 4
    # doctor: its 2-node check job, and the release the cluster runs now.
    proc = cli("doctor", "--site", cluster, "--set", "launcher.preflight_timeout=15", timeout=300,
               check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"scheduler: Slurm {version}\n" in proc.stdout and "all checks passed" in proc.stdout


def test_a_maintenance_reservation_is_why_a_run_waits(cli, cluster, tmp_path):
    name = "hpct-release-maint"
    subprocess.run(["scontrol", "delete", f"reservationname={name}"], capture_output=True)
    subprocess.run(["scontrol", "create", "reservation", f"reservationname={name}", "users=root",
                    "starttime=now", "duration=10", "nodes=ALL", "flags=maint,ignore_jobs"],
                   check=True, capture_output=True, text=True)
    job_id = None
    try:
        proc = cli("submit", job_file(tmp_path, "resv-wait", args=["--seconds", "1"]), "--site", cluster)
        job_id, _ = submitted(proc.stdout)
        assert f"maintenance reservation {name}" in proc.stderr  # warned at submit
        deadline, why = time.monotonic() + 60, {}
        while time.monotonic() < deadline and why.get("category") != "reservation":
            why = status_json(cli, job_id)["state"].get("why") or {}
            time.sleep(1)
        assert why.get("category") == "reservation", why
        assert [r["name"] for r in why["reservations"]][:1] == [name] and why["reservations"][0]["maint"]
        assert f"a reservation holds the nodes: {name}" in cli("status", job_id).stdout
    finally:
        if job_id:
            subprocess.run(["scancel", job_id], capture_output=True)
        subprocess.run(["scontrol", "delete", f"reservationname={name}"], capture_output=True)


def test_shell_and_attach(cli, cluster, tmp_path):
    # shell: an allocation with the job's environment, released at exit.
    child = spawn("shell", str(job_file(tmp_path, "rel-shell", args=["--seconds", "1"])), "--site", cluster)
    child.expect(PROMPT)
    host = child.match.group("host")
    child.sendline('echo "N""=$SLURMD_NODENAME"')
    child.expect(r"N=(\S+)\r\n")
    assert child.match.group(1) == host
    child.sendline("exit")
    child.expect(r"shell ended \(status 0\)")
    child.expect(pexpect.EOF)
    # attach: a shell on the node of a running job's rank.
    job_id, run_dir = submitted(cli("submit", job_file(tmp_path, "rel-attach", args=["--seconds", "120"]),
                                    "--site", cluster).stdout)
    try:
        # (attach --rank needs the rank's status file: the rank has started)
        wait_until(lambda: list((run_dir / "status").glob("rank-*.json")), 90, "rank 0 running", job_id)
        child = spawn("attach", str(run_dir), "--rank", "0")
        child.sendline('echo "A""T=$SLURM_JOB_ID|$PWD"')
        child.expect(r"AT=(\d+)\|(\S+)\r\n")
        assert child.match.groups() == (job_id, str(run_dir))
        child.sendline("exit")
        child.expect(pexpect.EOF)
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)

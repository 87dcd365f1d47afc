"""The REST way in against the real slurmrestd of the local cluster (tests/cluster/rest.sh:
Slurm 22.05's openapi/v0.0.38, JWT auth, http://127.0.0.1:6820): a site with only `rest:`
submits, follows (submit --wait, status, list), reads the logs from the shared file system,
cancels, starts a cancelled run again (submit --resume: the REST way to requeue, which the API
has no endpoint for), and a wrong token or an unreachable URL is one error line, exit 2. The
token is passed by name and found nowhere in the run directory or the index."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import yaml

from tests.conftest import submitted
from tests.operate_helpers import WORKER, status_json, wait_state

pytestmark = pytest.mark.slurm

REST_URL = "http://127.0.0.1:6820"


@pytest.fixture
def rest_site(tmp_path, cluster):
    """A site that reaches the cluster through slurmrestd only, and the environment that names
    its token (a fresh one from `scontrol token`)."""
    out = subprocess.run(["scontrol", "token", "username=root", "lifespan=900"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    token = out.strip().removeprefix("SLURM_JWT=")
    sites = tmp_path / "sites"
    sites.mkdir()

    def site(name, url):
        # The partition the session was given (scripts/test-all.sh sets SBATCH_PARTITION,
        # which only sbatch reads): a REST job names it itself.
        (sites / f"{name}.yaml").write_text(yaml.safe_dump({
            "name": name, "scheduler": "slurm", "cpu_mode": "on", "head": {"mode": "nodename"},
            "limits": {"max_nodes": 4, "cpus_per_node": 2},
            "defaults": {"resources": {"partition": os.environ.get("SBATCH_PARTITION", "debug"),
                                       "time": "00:05:00", "mem": "500M"},
                         # 22.05's slurmrestd cannot take --signal=B:... (restjobs.py)
                         "preemption": {"enabled": False}},
            "rest": {"url": url, "token_from": "SLURM_JWT_TESTCLUSTER"}}))
    site("restcluster", REST_URL)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        site("restgone", f"http://127.0.0.1:{s.getsockname()[1]}")
    return {"HPCTRAIN_SITE_PATH": str(sites), "SLURM_JWT_TESTCLUSTER": token}


def job(tmp_path, name, seconds) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "library": "command", "script": str(WORKER), "python": sys.executable,
        "args": ["--seconds", str(seconds)], "resources": {"nodes": 1, "procs_per_node": 1}}))
    return str(path)


def test_submit_follow_cancel_and_resume_through_slurmrestd(cli, tmp_path, rest_site):
    env = rest_site

    def run(*args, **kw):
        return cli(*args, **{"env": env, "cwd": tmp_path, **kw})

    # Submit and follow to the end: every state came from GET /slurm/v0.0.38/jobs.
    done = run("submit", job(tmp_path, "rest-done", 1), "--site", "restcluster", "--wait",
               timeout=180)
    job_id, run_dir = submitted(done.stdout)
    record = json.loads((run_dir / "run.json").read_text())
    assert record["rest"] == {"site": "restcluster", "url": REST_URL, "user": None,
                                       "token_from": "SLURM_JWT_TESTCLUSTER", "version": "v0.0.38",
                                       "timeout": 30}
    st = status_json(run, run_dir.name)
    assert st["state"]["state"] == "COMPLETED" and st["state"]["exit_code"] == 0
    assert "rank 0 done" in run("logs", run_dir.name).stdout  # the shared file system
    assert (run_dir / f"logs/slurm-{job_id}.out").is_file()  # --output came through

    # Cancel a running one, then start it again in the same run directory (submit --resume),
    # and cancel that too: nothing is left running.
    long_out = run("submit", job(tmp_path, "rest-long", 120), "--site", "restcluster").stdout
    long_id, long_dir = submitted(long_out)
    wait_state(run, long_dir.name, {"RUNNING"}, timeout=120)
    run("cancel", long_dir.name)
    assert wait_state(run, long_dir.name, {"CANCELLED"}, timeout=60)["state"]["done"]
    again = run("submit", "--resume", long_dir.name).stdout
    new_id = json.loads((long_dir / "run.json").read_text())["job_id"]
    assert new_id != long_id and new_id in again
    assert json.loads((long_dir / "run.json").read_text())["jobs"] == [long_id]
    run("cancel", long_dir.name)
    assert wait_state(run, long_dir.name, {"CANCELLED"}, timeout=60)["state"]["job"] == new_id
    listed = run("list").stdout
    assert "rest-done" in listed and "rest-long" in listed and "CANCELLED" in listed

    # The token is passed by name: nowhere on disk.
    token = env["SLURM_JWT_TESTCLUSTER"]
    for d in (run_dir, long_dir, tmp_path / "home"):
        for f in d.rglob("*"):
            if f.is_file():
                assert token.encode() not in f.read_bytes(), f

    # A wrong token and an unreachable server: one error line each, naming the site and the fix.
    bad = run("submit", job(tmp_path, "rest-bad", 1), "--site", "restcluster", check=False,
              env=dict(env, SLURM_JWT_TESTCLUSTER=token[:-4] + "AAAA"))
    assert bad.returncode == 2 and bad.stderr.startswith("error: site 'restcluster': ")
    assert "HTTP 500" in bad.stderr and "wrong or expired token" in bad.stderr, bad.stderr
    gone = run("submit", job(tmp_path, "rest-gone", 1), "--site", "restgone", check=False)
    assert gone.returncode == 2 and gone.stderr.startswith(
        "error: site 'restgone': cannot reach slurmrestd at http://127.0.0.1:")
    assert "rest.url" in gone.stderr and "Traceback" not in bad.stderr + gone.stderr

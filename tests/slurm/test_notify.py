"""Notifications sent by the job itself (rank/end/notify.py from the batch shell's hooks), on the
real local Slurm cluster: a webhook on the bridge address the nodes reach (10.231.0.1) receives
the events of a run that is preempted by a `high` job, requeued and completes, in order, and the
URL, which carries a token, is nowhere in the run directory, its script or its logs."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import SLURM_RELEASE, submitted, wait_for_job
from tests.slurm.survive import preempt_by_high_job, slurm_log, wait_for_checkpoint

pytestmark = pytest.mark.slurm

# The host on the cluster's bridge (hpct0; the 24.11 cluster's is hpct1, 10.231.1.1: set by
# tests/cluster/release-exec.sh): the only address bound here.
BRIDGE = os.environ.get("HPCTRAIN_CLUSTER_HOST_IP", "10.231.0.1")
JOB = "examples/resumable_train.yaml"


@pytest.fixture
def webhook():
    """A webhook on the bridge address: (its URL with a secret token, the bodies it got)."""
    token = secrets.token_hex(16)
    got: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(min(int(self.headers.get("Content-Length") or 0), 65536))
            ok = self.path == f"/hook/{token}"
            if ok:
                got.append(json.loads(body))
            self.send_response(200 if ok else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((BRIDGE, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{BRIDGE}:{server.server_address[1]}/hook/{token}", token, got
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def jobs():
    ids: list[str] = []
    try:
        yield ids
    finally:
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True)


def _everything_in(run_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(run_dir.rglob("*"))
                    if p.is_file() and not p.is_symlink() and "checkpoints" not in p.parts)


def test_job_sends_preempted_requeued_completed(cli, cluster, tmp_path, webhook, jobs):
    url, token, got = webhook
    job_id, run_dir = submitted(cli(
        "submit", JOB, "--site", cluster, "--set", f"python={sys.executable}",
        "--set", "resources.nodes=1", "--set", "resources.procs_per_node=1",
        "--set", "args=[--iterations,20,--sleep,0.5,--save-every,5]",
        "--set", "notify.url_from=HPCT_TEST_HOOK", "--set", "notify.format=json",
        env={"HPCT_TEST_HOOK": url}).stdout)
    jobs.append(job_id)
    wait_for_checkpoint(run_dir, job_id)
    jobs.append(preempt_by_high_job(job_id, tmp_path))
    info = wait_for_job(job_id, timeout=400)
    log = slurm_log(run_dir)
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", log
    # 24.11 requeues the preempted job itself once its script ends (a `scontrol requeue` there
    # made it run twice); 22.05 needs the script's requeue (docs/slurm-releases.md).
    assert ("Slurm requeues job" in log) == (SLURM_RELEASE != "22.05"), log

    # What the webhook got, in order: each a plain JSON body naming the run and the job.
    assert [b["event"] for b in got] == ["start", "preempted", "requeued", "completed"], (got, log)
    assert {b["job"] for b in got} == {job_id} and {b["run_id"] for b in got} == {run_dir.name}
    assert {b["name"] for b in got} == {"resumable-train"}
    assert got[1]["detail"].startswith(f"requeueing job {job_id} (requeue 1 of at most")
    assert got[2]["detail"].startswith("running again (restart 1) on node")
    assert got[3]["restarts"] == 1 and "restarts" not in got[0]

    # The run's records say what was sent, from where, without the URL.
    records = [json.loads(line) for line in
               (run_dir / "status" / "notify.jsonl").read_text().splitlines()]
    assert [(r["event"], r["ok"], r["status"]) for r in records] == [
        ("start", True, 200), ("preempted", True, 200), ("requeued", True, 200),
        ("completed", True, 200)]
    assert all(r["from"].startswith("node") and r["from"].endswith("(the job)") for r in records)
    assert "notify: sent preempted (HTTP 200)" in log

    # Nothing secret anywhere: the run directory (script, job.yaml, records, logs).
    assert "HPCT_TEST_HOOK" in (run_dir / "job.sbatch").read_text()
    everything = _everything_in(run_dir)
    assert token.encode() not in everything and url.encode() not in everything

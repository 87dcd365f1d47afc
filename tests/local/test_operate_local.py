"""The same operations on the local backend: real detached processes, real torchrun --standalone."""
from __future__ import annotations

import os
import time

from tests.conftest import submitted
from tests.operate_helpers import job_file, max_overlap, results, status_json, wait_state


def test_local_status_follow_and_failure(cli, tmp_path):
    jf = job_file(tmp_path, "loc-follow", procs=2, args=["--seconds", "3", "--fail-rank", "1"])
    job_id, run_dir = submitted(cli("submit", jf).stdout)  # the submitter has exited here
    assert job_id.startswith("local-")
    wait_state(cli, run_dir.name, {"RUNNING", "FAILED"})
    follow = cli("logs", run_dir.name, "-f", timeout=120, cwd=tmp_path)
    # (not rank 0's last line: rank 1 fails as rank 0 ends, and torchrun may stop rank 0 first)
    assert "[rank 0] step 0 of rank 0" in follow.stdout
    assert "deliberate failure on rank 1" in follow.stdout
    st = status_json(cli, run_dir.name)
    assert st["state"]["state"] == "FAILED" and st["state"]["exit_code"] == 1
    assert [f["rank"] for f in st["failures"]] == [1]
    assert "rank 1 done" not in cli("logs", run_dir.name, "--rank", "0").stdout
    node = os.uname().nodename
    assert "step 0 of rank 1" in cli("logs", run_dir.name, "--node", node).stdout


def test_local_cancel_kills_ranks(cli, tmp_path):
    jf = job_file(tmp_path, "loc-cancel", procs=2, args=["--seconds", "120"])
    job_id, run_dir = submitted(cli("submit", jf).stdout)
    deadline = time.monotonic() + 120
    while len(list(run_dir.glob("status/rank-*.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    import json
    pids = [json.loads(p.read_text())["pid"] for p in run_dir.glob("status/rank-*.json")]
    assert len(pids) == 2
    cli("cancel", job_id)
    st = status_json(cli, job_id)
    assert st["state"]["state"] == "CANCELLED"
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z"


def test_local_sweep_two_at_a_time(cli, tmp_path):
    jf = job_file(tmp_path, "loc-sweep", args=["--seconds", "2"],
                  sweep={"grid": {"env.LR": [0.1, 0.01]}, "seeds": [1, 2], "parallel": 2})
    proc = cli("submit", jf, "--wait", timeout=300)
    _, run_dir = submitted(proc.stdout)
    res = results(run_dir)
    assert len(res) == 4 and max_overlap([(r["start"], r["end"]) for r in res]) <= 2
    assert sorted((r["lr"], r["seed"]) for r in res) == [("0.01", "1"), ("0.01", "2"), ("0.1", "1"), ("0.1", "2")]
    st = status_json(cli, run_dir.name)
    assert st["state"]["state"] == "COMPLETED" and len(st["state"]["tasks"]) == 4
    assert "rank 0 done" in cli("logs", run_dir.name, "--task", "3").stdout

"""Following, debugging and cancelling runs on the real local Slurm cluster."""
from __future__ import annotations

from tests.conftest import submitted
from tests.operate_helpers import job_file, max_overlap, results, status_json, wait_state


def test_running_status_and_followed_logs(cli, cluster, tmp_path):
    jf = job_file(tmp_path, "ops-follow", nodes=2, procs=1, args=["--seconds", "6"])
    job_id, run_dir = submitted(cli("submit", jf, "--site", cluster).stdout)
    st = wait_state(cli, job_id, {"RUNNING", "COMPLETED"})
    if st["state"]["state"] == "RUNNING":
        assert st["state"]["nodes"] == "node[1-2]" or "," in st["state"]["nodes"] or "[" in st["state"]["nodes"]
        text = cli("status", run_dir.name, cwd=tmp_path).stdout  # by run id, from elsewhere
        assert "RUNNING" in text and "2 node(s) x 1 rank(s)" in text
    follow = cli("logs", job_id, "-f", timeout=300, cwd=tmp_path)  # returns when the job ends
    assert "[rank 0] rank 0 done" in follow.stdout and "[rank 1] rank 1 done" in follow.stdout
    assert "done: all ranks exited 0" in follow.stdout
    st = status_json(cli, str(run_dir))
    assert st["state"]["state"] == "COMPLETED" and st["state"]["exit_code"] == 0
    one = cli("logs", job_id, "--rank", "1").stdout
    assert "rank 1 done" in one and "rank 0" not in one
    idents = {r["rank"]: r for r in results(run_dir)}
    node_of_1 = idents[1]["host"]
    by_node = cli("logs", job_id, "--node", node_of_1).stdout
    assert "rank 1 done" in by_node and "rank 0 done" not in by_node
    bad = cli("logs", job_id, "--node", "node9", check=False)
    assert bad.returncode == 2 and "nodes of this run" in bad.stderr


def test_failed_rank_is_traced(cli, cluster, tmp_path):
    jf = job_file(tmp_path, "ops-fail", nodes=2, procs=1, args=["--fail-rank", "1"])
    proc = cli("submit", jf, "--site", cluster, "--wait", check=False, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAILED exit 1" in proc.stdout
    assert "failed: rank 1 on node" in proc.stdout and "deliberate failure on rank 1" in proc.stdout
    job_id, _ = submitted(proc.stdout)
    st = status_json(cli, job_id)
    assert st["state"]["state"] == "FAILED" and st["state"]["exit_code"] == 1
    (note,) = st["failures"]
    assert note["rank"] == 1 and note["node"].startswith("node") and "RuntimeError" in note["error"]
    assert "rank 1 on node" in cli("status", job_id).stdout


def test_cancel(cli, cluster, tmp_path):
    jf = job_file(tmp_path, "ops-cancel", args=["--seconds", "120"])
    job_id, run_dir = submitted(cli("submit", jf, "--site", cluster).stdout)
    wait_state(cli, job_id, {"RUNNING"})
    out = cli("cancel", run_dir.name).stdout
    st = wait_state(cli, job_id, {"CANCELLED"}, timeout=60)
    assert st["state"]["done"] and "CANCELLED" in out + st["state"]["state"]
    listed = cli("list", "--json").stdout
    assert '"CANCELLED"' in listed
    assert "ops-cancel" in cli("list").stdout


def test_sweep_array_two_at_a_time(cli, cluster, tmp_path):
    jf = job_file(tmp_path, "ops-sweep", args=["--seconds", "4"],
                  sweep={"grid": {"env.LR": [0.1, 0.01]}, "seeds": [1, 2], "parallel": 2})
    dry = cli("submit", jf, "--site", cluster, "--dry-run").stdout
    assert "#SBATCH --array=0-3%2" in dry and "#     3  env.LR=0.01  seed=2" in dry
    proc = cli("submit", jf, "--site", cluster, "--wait", timeout=400)
    job_id, run_dir = submitted(proc.stdout)
    assert "4 completed" in proc.stdout
    res = results(run_dir)
    assert len(res) == 4
    assert max_overlap([(r["start"], r["end"]) for r in res]) <= 2
    seen = {(r["task"], r["lr"], r["seed"]) for r in res}
    assert seen == {("0", "0.1", "1"), ("1", "0.1", "2"), ("2", "0.01", "1"), ("3", "0.01", "2")}
    assert len({r["job_id"] for r in res}) == 4  # each task its own SLURM_JOB_ID ...
    ports = {r["port"] for r in res}
    assert all(int(r["port"]) == 61000 + 2 * (int(r["job_id"]) % 2268) for r in res)  # ... and port
    st = status_json(cli, job_id)
    assert st["state"]["state"] == "COMPLETED"
    assert [t["job"] for t in st["state"]["tasks"]] == [f"{job_id}_{i}" for i in range(4)]
    assert "4 completed" in cli("status", f"{job_id}_2").stdout
    assert "rank 0 done" in cli("logs", f"{job_id}_2").stdout
    assert len(ports) == 4  # so two tasks sharing a node never collide

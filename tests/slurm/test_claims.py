"""What the README promises about runs on Slurm, each tried for real on the local cluster: a run
directory resubmitted by hand, a job whose record cannot be written is cancelled, one array task
preempted and requeued alone, a controller that cannot be reached is said so, and `list` costs
one query to slurmctld whatever the number of runs."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import submitted, wait_for_job
from tests.operate_helpers import job_file, status_json
from tests.slurm.survive import attempts, preempt, wait_for_checkpoint, wait_until


def test_run_directory_resubmits_by_hand(cli, cluster, tmp_path):
    jf = job_file(tmp_path, "by-hand", nodes=2, procs=1, args=["--seconds", "1"])
    job_id, run_dir = submitted(cli("submit", jf, "--site", cluster).stdout)
    assert wait_for_job(job_id)["JobState"] == "COMPLETED"
    first = sorted(run_dir.glob("results/rank-*.json"))
    for f in first:
        f.unlink()
    # The README: "Resubmitting by hand is `sbatch <run dir>/job.sbatch`", from anywhere.
    out = subprocess.run(["sbatch", "--parsable", str(run_dir / "job.sbatch")], cwd="/",
                         capture_output=True, text=True, check=True)
    again = out.stdout.strip().split(";")[0]
    assert wait_for_job(again)["JobState"] == "COMPLETED"
    results = [json.loads(p.read_text()) for p in sorted(run_dir.glob("results/rank-*.json"))]
    assert [r["job_id"] for r in results] == [again, again]
    assert (run_dir / "logs" / f"slurm-{again}.out").exists()


def test_a_run_that_cannot_be_recorded_is_never_queued(cli, cluster, tmp_path):
    """The run is recorded and indexed before sbatch runs: when that fails, nothing is queued
    and nothing is left. (A record that fails after sbatch answered is cancelled: see
    test_hostile_slurm.py, fail-record.)"""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where hpctrain's state directory should be\n")
    jf = job_file(tmp_path, "no-record", nodes=1, procs=1, args=["--seconds", "60"])
    proc = cli("submit", jf, "--site", cluster, check=False,
               env={"HPCTRAIN_HOME": str(blocker / "home")})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cannot record the run in the index" in proc.stderr and "Traceback" not in proc.stderr
    runs = tmp_path / "runs" / "no-record"
    assert not runs.exists() or not list(runs.iterdir())
    queue = subprocess.run(["squeue", "--json", "--all"], capture_output=True, text=True).stdout
    assert "no-record" not in queue


def test_one_array_task_is_preempted_and_requeued_alone(cli, cluster, tmp_path):
    job = "examples/resumable_train.yaml"
    proc = cli("submit", job, "--site", cluster, "--set", f"python={sys.executable}",
               "--set", "resources.nodes=1", "--set", "resources.procs_per_node=1",
               "--set", "args=[--iterations,20,--sleep,0.5,--save-every,5]",
               "--set", "sweep={seeds: [1, 2], parallel: 2}")
    job_id, run_dir = submitted(proc.stdout)
    task1 = run_dir / "tasks" / "1"
    wait_for_checkpoint(task1, job_id)
    preempt(f"{job_id}_1")
    info = wait_for_job(f"{job_id}_1", timeout=400)
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", info
    assert wait_for_job(f"{job_id}_0", timeout=400)["Restarts"] == "0"
    log1 = "".join(p.read_text() for p in run_dir.glob(f"logs/slurm-{job_id}_1.out"))
    assert f"requeueing job {job_id}_1 " in log1, log1  # the task, not the whole array
    second = [a for a in attempts(task1) if a["job_restart"] == 1]
    assert second and {a["started_from"] for a in second} != {0}, attempts(task1)
    assert all(a["job_restart"] == 0 for a in attempts(run_dir / "tasks" / "0"))


def test_status_says_when_slurm_cannot_be_reached(cli, cluster, tmp_path):
    jf = job_file(tmp_path, "unreachable", nodes=1, procs=1, args=["--seconds", "30"])
    job_id, run_dir = submitted(cli("submit", jf, "--site", cluster).stdout)
    try:
        bad = tmp_path / "slurm.conf"
        # A controller that is not there. MessageTimeout=2: each Slurm command gives up after
        # ~3 s instead of ~19 s (the default 10 s); what status says is the same.
        bad.write_text("ClusterName=nowhere\nSlurmctldHost=nowhere(10.231.0.254)\nMessageTimeout=2\n")
        proc = cli("status", run_dir.name, check=False, env={"SLURM_CONF": str(bad)})
        assert proc.returncode == 0, proc.stderr
        assert "cannot reach slurm: 'squeue" in proc.stdout, proc.stdout
        assert "no longer remembers" not in proc.stdout
        st = json.loads(cli("status", run_dir.name, "--json", env={"SLURM_CONF": str(bad)}).stdout)
        assert st["state"]["state"] in ("PENDING", "RUNNING")  # the last state known, kept
    finally:
        subprocess.run(["scancel", job_id])


def _job_info_rpcs() -> int:
    """slurmctld's count of job-information requests (what squeue and scontrol show job ask)."""
    text = subprocess.run(["sdiag"], capture_output=True, text=True, check=True).stdout
    total = 0
    for name in ("REQUEST_JOB_INFO", "REQUEST_JOB_INFO_SINGLE", "REQUEST_JOB_USER_INFO"):
        m = re.search(rf"^\s*{name}\s+\(\s*\d+\) count:(\d+)", text, re.M)
        total += int(m.group(1)) if m else 0
    return total


@pytest.mark.alone  # slurmctld's counts: no other session's request may land among them
def test_list_asks_slurm_once_whatever_the_number_of_runs(cli, cluster, tmp_path):
    jobs, dirs = [], []
    for i in range(5):
        jf = job_file(tmp_path, f"many-{i}", nodes=1, procs=1, args=["--seconds", "60"])
        job_id, run_dir = submitted(cli("submit", jf, "--site", cluster).stdout)
        jobs.append(job_id)
        dirs.append(run_dir)
    try:
        # Each job, as it starts, asks scontrol once for its own allocation (the node's sampler,
        # rank/during/sampler.py): counted by the same sdiag, so the count waits until all 5 have.
        wait_until(lambda: all(list((d / "status").glob("allocation-*.json")) for d in dirs), 180,
                   "every job's allocation record")
        before = _job_info_rpcs()
        rows = json.loads(cli("list", "--json").stdout)
        after = _job_info_rpcs()
        mine = [r for r in rows if r["name"].startswith("many-")]
        assert len(mine) == 5
        # One squeue for every run, and one `squeue --start` more while any of them waits (why
        # it waits: its place in the queue and Slurm's estimate, for all the waiting ones at once).
        waiting = any(r["state"]["state"] == "PENDING" for r in mine)
        assert after - before == 1 + waiting, (before, after, waiting)
        before = _job_info_rpcs()
        st = status_json(cli, jobs[0])
        assert _job_info_rpcs() - before == 1 + (st["state"]["state"] == "PENDING")
    finally:
        subprocess.run(["scancel", *jobs])


NODE_HOSTS = ["bash", str(Path(__file__).resolve().parents[1] / "cluster" / "node-hosts.sh")]


def test_a_head_that_resolves_to_loopback_stops_the_job(cli, cluster, tmp_path):
    """As on a machine whose /etc/hosts says "127.0.1.1 <its name>": the head's own name resolves
    to loopback there only. The job must stop with a message, not hang at the rendezvous."""
    nodes = [f"node{i}" for i in range(1, 5)]
    jf = job_file(tmp_path, "loopback-head", nodes=2, procs=1, args=["--seconds", "1"])
    for node in nodes:
        subprocess.run(NODE_HOSTS + [node, "loopback"], check=True)
    try:
        job_id, run_dir = submitted(cli("submit", jf, "--site", cluster).stdout)
        info = wait_for_job(job_id, timeout=120)
    finally:
        for node in nodes:
            subprocess.run(NODE_HOSTS + [node, "restore"], check=True)
    log = "".join(p.read_text() for p in run_dir.glob("logs/slurm-*.out"))
    assert info["JobState"] == "FAILED", log
    assert re.search(r"error: the head 'node\d' resolves to loopback \(127\.0\.1\.1\): other nodes "
                     r"could not reach it; set the site's head\.mode to interface or suffix", log), log
    assert "launch: " not in log and not (run_dir / "results").exists()


def test_a_head_that_does_not_resolve_stops_the_job(cli, cluster, tmp_path, monkeypatch):
    sites = tmp_path / "sites"
    sites.mkdir()
    site = (Path(__file__).resolve().parents[2] / "site_configs" / "localcluster.yaml").read_text()
    site = site.replace("name: localcluster", "name: badsuffix").replace(
        "  mode: nodename", "  mode: suffix\n  suffix: -nosuch")
    (sites / "badsuffix.yaml").write_text(site)
    monkeypatch.setenv("HPCTRAIN_SITE_PATH", str(sites))
    jf = job_file(tmp_path, "unresolvable-head", nodes=2, procs=1, args=["--seconds", "1"])
    job_id, run_dir = submitted(cli("submit", jf, "--site", "badsuffix").stdout)
    info = wait_for_job(job_id, timeout=120)
    log = "".join(p.read_text() for p in run_dir.glob("logs/slurm-*.out"))
    assert info["JobState"] == "FAILED", log
    assert re.search(r"error: the head 'node\d-nosuch' does not resolve on node\d", log), log

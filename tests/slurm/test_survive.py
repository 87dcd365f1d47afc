"""Preemption -> checkpoint -> requeue -> resume, restart caps, torchrun restarts and the
rendezvous preflight, on the real local Slurm cluster with a real DDP training."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, submitted, wait_for_job
from tests.slurm.survive import attempts, preempt, slurm_log, wait_for_checkpoint, wait_until

pytestmark = pytest.mark.slurm
JOB = "examples/resumable_train.yaml"


def submit(cli, cluster, *sets):
    args = ["submit", JOB, "--site", cluster, "--set", f"python={sys.executable}"]
    for s in sets:
        args += ["--set", s]
    return submitted(cli(*args).stdout)


def test_preempted_job_saves_requeues_and_resumes(cli, cluster):
    job_id, run_dir = submit(cli, cluster, "args=[--iterations,40,--sleep,0.5,--save-every,5]")
    wait_for_checkpoint(run_dir, job_id)
    preempt(job_id)
    info = wait_for_job(job_id, timeout=400)
    log = slurm_log(run_dir)
    assert info["JobState"] == "COMPLETED", log
    assert info["Restarts"] == "1", info

    runs = attempts(run_dir)
    first = [a for a in runs if a["job_restart"] == 0]
    second = [a for a in runs if a["job_restart"] == 1]
    assert len(first) == 4 and len(second) == 4, runs
    assert {a["stopped"] for a in first} == {"preempted"}, runs
    saved = {a["reached"] for a in first}
    assert len(saved) == 1, runs  # all ranks agreed on the step at which to save
    saved_at = saved.pop()
    # The second run resumed from the checkpoint saved on the signal — not from 0 and not
    # from an older periodic one.
    assert {a["started_from"] for a in second} == {saved_at}, runs
    assert saved_at > 0
    assert {a["resume_from"] for a in second} == {
        str(run_dir / "checkpoints" / f"model_{saved_at:06d}.pt")}
    assert {a["stopped"] for a in second} == {"completed"} and {a["reached"] for a in second} == {40}
    assert all(a["resume_from"] is None and a["started_from"] == 0 for a in first)
    # Every step is in the log, with a timestamp.
    stamp = r"\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\] hpctrain: "
    for line in ("preemption: SIGUSR2 received; forwarded to the ranks",
                 "preemption: the ranks exited (status 0)",
                 f"preemption: requeueing job {job_id} (requeue 1 of at most 2)",
                 "done: all ranks exited 0"):
        assert re.search(stamp + re.escape(line), log), (line, log)
    assert len(re.findall(r"hpctrain: preflight: all 4 ranks met in [\d.]+ s", log)) == 2, log
    assert not (run_dir / "status" / "failure.json").exists()


def test_requeue_cap_ends_the_job(cli, cluster):
    job_id, run_dir = submit(cli, cluster, "args=[--iterations,400,--sleep,0.5,--save-every,5]",
                             "preemption.max_requeues=1")
    wait_for_checkpoint(run_dir, job_id)
    preempt(job_id)
    # Requeued once (the cap allows one); once the second run trains, preempt it again.
    rank0 = run_dir / "logs" / "rank-0.log"

    def second_run_training():
        text = rank0.read_text() if rank0.exists() else ""
        return "starting at iteration" in text.partition("hpctrain: resuming from")[2]
    wait_until(second_run_training, 240, "the second run to train", job_id)
    preempt(job_id)
    info = wait_for_job(job_id, timeout=300)
    log = slurm_log(run_dir)
    assert info["JobState"] == "FAILED", log
    assert info["ExitCode"] == "75:0", info
    assert info["Restarts"] == "1", info
    assert re.search(r"hpctrain: preemption: not requeueing: job \d+ has been requeued 1 time\(s\), "
                     r"the limit is preemption.max_requeues=1", log), log
    failure = json.loads((run_dir / "status" / "failure.json").read_text())
    assert failure["reason"] == "preempted" and failure["exit_status"] == 75
    assert "max_requeues=1" in failure["message"]
    # The second run had resumed from the first run's checkpoint before being preempted again.
    second = [a for a in attempts(run_dir) if a["job_restart"] == 1]
    assert second and {a["started_from"] for a in second} != {0}, attempts(run_dir)


def test_killed_rank_is_restarted_by_torchrun_and_resumes(cli, cluster):
    # 2 nodes x 2 ranks. Rank 1 is SIGKILLed at iteration 8 (once per run); torchrun restarts
    # the worker group on both nodes in the same allocation and the bootstrap hands every rank
    # the iteration-5 checkpoint. Before the fix (a fresh store per attempt, survive.py) the
    # restarted ranks read the dead attempt's gloo addresses: "Connection refused", or a hang.
    job_id, run_dir = submit(cli, cluster, "launcher.max_restarts=1",
                             "args=[--iterations,12,--sleep,0.3,--save-every,5,--die-at,8,--die-rank,1]")
    info = wait_for_job(job_id, timeout=400)
    log = slurm_log(run_dir)
    assert info["JobState"] == "COMPLETED", log
    assert info["Restarts"] == "0"  # no requeue: the restart happened inside the allocation
    assert (run_dir / "results" / "killed-rank-1-at-8").exists()  # the kill did happen
    runs = attempts(run_dir)
    # Only the restarted attempt finishes: one record per rank, on both nodes.
    assert sorted(a["rank"] for a in runs) == [0, 1, 2, 3], runs
    assert {a["world_size"] for a in runs} == {4} and len({a["host"] for a in runs}) == 2, runs
    # TORCHELASTIC_RESTART_COUNT is per node: 1 where the rank died, 0 or 1 on the other node.
    assert max(a["torchrun_restart"] for a in runs) == 1, runs
    assert {a["started_from"] for a in runs} == {5}, runs
    assert {a["reached"] for a in runs} == {12}
    # The preflight's rank check ran before each attempt: the first and the restarted one.
    assert len(re.findall(r"hpctrain: preflight: all 4 ranks met in [\d.]+ s", log)) == 2, log
    assert not (run_dir / "status" / "failure.json").exists()


def test_rank_that_keeps_dying_ends_the_job_with_rank_node_and_error(cli, cluster):
    job_id, run_dir = submit(cli, cluster, "launcher.max_restarts=1",
                             "args=[--iterations,12,--sleep,0.2,--die-at,3,--die-rank,1,--die-always]")
    info = wait_for_job(job_id, timeout=400)
    log = slurm_log(run_dir)
    assert info["JobState"] == "FAILED", log
    failure = json.loads((run_dir / "status" / "failure.json").read_text())
    assert failure["reason"] == "ranks" and failure["exit_status"] != 0
    [rank1] = [r for r in failure["ranks"] if r["rank"] == 1]
    assert rank1["node"] in ("node1", "node2", "node3", "node4")
    # The restarted attempt's own error, recorded with rank and node (its peers' "connection
    # closed" errors come after it and are not the message).
    error = "RuntimeError: injected failure at iteration 3"
    assert rank1["error"] == error, rank1
    # It failed on both attempts: torchrun did restart it once, then gave up.
    rank1_log = (run_dir / "logs" / "rank-1.log").read_text()
    assert rank1_log.count(error) == 2, rank1_log
    assert failure["message"].startswith(f"rank 1 on {rank1['node']} failed (exit status 1): {error}"), failure
    assert f"hpctrain: failure: rank 1 on {rank1['node']} failed (exit status 1): {error}" in log, log


def test_rank_check_names_a_rank_that_does_not_arrive(cli, cluster, tmp_path):
    # Rank 3's process reaches the preflight's rank check only after everyone gave up: a
    # sitecustomize of the test's own (on the job's PYTHONPATH) holds rank 3's bootstrap back.
    # The others must name it and stop the job within launcher.preflight_timeout, not wait in
    # init_process_group for 30 minutes.
    late = tmp_path / "late"
    late.mkdir()
    (late / "sitecustomize.py").write_text(
        "import os, sys, time\n"
        "if os.environ.get('RANK') == '3' and sys.argv[-1].endswith('bootstrap.json'):\n"
        "    time.sleep(40)\n")
    job_id, run_dir = submit(cli, cluster, "launcher.preflight_timeout=10",
                             f"env.PYTHONPATH={late}",
                             "args=[--iterations,4,--sleep,0.1]")
    wait_until(lambda: wait_for_job(job_id, timeout=300, states=("RUNNING",)), 300, "running", job_id)
    info = wait_for_job(job_id, timeout=120)
    log = slurm_log(run_dir)
    assert info["JobState"] == "FAILED", log
    assert not (run_dir / "results").exists()  # the program never trained
    failure = json.loads((run_dir / "status" / "failure.json").read_text())
    assert failure["reason"] == "ranks", failure
    missing = (r"RankCheckError: rank 3 \((node\d)\) did not reach the rank check within 10 s "
               r"\(launcher.preflight_timeout\); 3 of 4 ranks arrived")
    m = re.match(r"rank [012] on node\d failed \(exit status 1\): " + missing, failure["message"])
    assert m, failure
    # The node named is the one rank 3 was on: rank 2's (torchrun numbers a node's ranks
    # contiguously, two per node here).
    assert m.group(1) == json.loads((run_dir / "status" / "rank-2.json").read_text())["node"]
    # Every rank that arrived recorded the same verdict, none a vanished store.
    errors = {r["rank"]: r["error"] for r in failure["ranks"]}
    assert sorted(errors) == [0, 1, 2], failure
    assert all(re.match(missing, e) for e in errors.values()), errors


def test_preflight_names_a_node_that_cannot_reach_the_head(cli, cluster, tmp_path, monkeypatch):
    # A site pinned to node1,node2 (exclusive: no one else's job shares them while node2's
    # route to the head's rendezvous ports is cut).
    sites = tmp_path / "sites"
    sites.mkdir()
    site = (ROOT / "site_configs" / "localcluster.yaml").read_text()
    site = site.replace("name: localcluster", "name: pinned12")
    site += "sbatch_extra: [\"--nodelist=node[1-2]\", --exclusive]\n"
    (sites / "pinned12.yaml").write_text(site)
    monkeypatch.setenv("HPCTRAIN_SITE_PATH", str(sites))
    flag = tmp_path / "go"
    job_id, run_dir = submitted(cli(
        "submit", JOB, "--site", "pinned12", "--set", f"python={sys.executable}",
        "--set", "launcher.preflight_timeout=10",
        # Hold the job before its preflight until the route is cut (at most 120 s).
        "--set", f'setup=["for _ in $(seq 600); do [ -e {flag} ] && break; sleep 0.2; done"]').stdout)
    wait_until(lambda: wait_for_job(job_id, timeout=300, states=("RUNNING",)), 300, "running", job_id)
    rule = ["ip", "rule", "add", "to", "10.231.0.11", "ipproto", "tcp", "dport", "61000-65534",
            "prohibit", "priority", "100"]
    ns = ["nsenter", "--net=/run/netns/hpct-node2"]
    subprocess.run(ns + rule, check=True)
    try:
        flag.touch()
        started = time.monotonic()
        info = wait_for_job(job_id, timeout=120)
        elapsed = time.monotonic() - started
    finally:
        subprocess.run(ns + ["ip", "rule", "del", "priority", "100"], check=True)
    log = slurm_log(run_dir)
    assert info["JobState"] == "FAILED", log
    assert elapsed < 10 + 20, (elapsed, log)  # the bound plus Slurm's teardown, not 600 s
    assert "launch: " not in log  # torchrun never started
    assert re.search(r"hpctrain: error: preflight failed \(status \d+\): .*node2", log), log
    failure = json.loads((run_dir / "status" / "failure.json").read_text())
    assert failure["reason"] == "preflight" and "node2" in failure["message"], failure

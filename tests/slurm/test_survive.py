"""Preemption -> checkpoint -> requeue -> resume, restart caps, torchrun restarts and the
rendezvous preflight, on the real local Slurm cluster with a real DDP training."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from contextlib import contextmanager

from tests.conftest import ROOT, job_state, submitted, wait_for_job
from tests.slurm.survive import attempts, preempt, slurm_log, wait_for_checkpoint, wait_until

JOB = "examples/resumable_train.yaml"


# One rank per node unless a test is about several (a rank's start costs ~3 CPU-seconds, and
# this tier shares the machine's two cores): 2 x 2 in the preemption cycle and where rank 3 is
# the one that stalls.
ONE_PER_NODE = "resources.procs_per_node=1"


def submit(cli, cluster, *sets, procs: int = 1):
    args = ["submit", JOB, "--site", cluster, "--set", f"python={sys.executable}",
            "--set", f"resources.procs_per_node={procs}"]
    for s in sets:
        args += ["--set", s]
    return submitted(cli(*args).stdout)


def test_preempted_job_saves_requeues_resumes_and_meets_its_requeue_cap(cli, cluster):
    # One run, both halves of the preemption story (each attempt is ~4 rank start-ups): the
    # first preemption lands after the first checkpoint (5); the job saves, requeues itself
    # (1 of at most 1) and resumes from exactly that save; the second preemption, once the
    # resumed run trains, meets the cap: not requeued, FAILED with exit status 75.
    job_id, run_dir = submit(cli, cluster, "args=[--iterations,400,--sleep,0.5,--save-every,5]",
                             "preemption.max_requeues=1", procs=2)
    wait_for_checkpoint(run_dir, job_id)
    preempt(job_id)
    rank0 = run_dir / "logs" / "rank-0.log"

    def second_run_training():
        text = rank0.read_text() if rank0.exists() else ""
        return "starting at iteration" in text.partition("hpctrain: resuming from")[2]
    wait_until(second_run_training, 240, "the second run to train", job_id)
    preempt(job_id)
    info = wait_for_job(job_id, timeout=400)
    log = slurm_log(run_dir)
    assert info["JobState"] == "FAILED", log
    assert info["ExitCode"] == "75:0", info
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
    # from an older periodic one — and trained on from there.
    assert {a["started_from"] for a in second} == {saved_at}, runs
    assert saved_at > 0
    assert {a["resume_from"] for a in second} == {
        str(run_dir / "checkpoints" / f"model_{saved_at:06d}.pt")}
    assert {a["stopped"] for a in second} == {"preempted"}, runs
    assert len({a["reached"] for a in second}) == 1 and second[0]["reached"] > saved_at, runs
    assert all(a["resume_from"] is None and a["started_from"] == 0 for a in first)
    # Every step is in the log, with a timestamp.
    stamp = r"\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\] hpctrain: "
    for line in ("preemption: SIGUSR2 received; forwarded to the ranks",
                 "preemption: the ranks exited (status 0)",
                 # scancel --signal by hand: Slurm's view is "running", not preempted
                 f"preemption: the time-limit warning or a signal sent to the job: requeueing job {job_id} (requeue 1 of at most 1)",
                 "preemption: not requeueing: job "):
        assert re.search(stamp + re.escape(line), log), (line, log)
    assert re.search(r"hpctrain: preemption: not requeueing: job \d+ has been requeued 1 time\(s\), "
                     r"the limit is preemption.max_requeues=1", log), log
    assert len(re.findall(r"hpctrain: preflight: all 4 ranks met in [\d.]+ s", log)) == 2, log
    failure = json.loads((run_dir / "status" / "failure.json").read_text())
    assert failure["reason"] == "preempted" and failure["exit_status"] == 75
    assert "max_requeues=1" in failure["message"]


def test_killed_rank_is_restarted_by_torchrun_and_resumes(cli, cluster):
    # 2 nodes x 1 rank. Rank 1 is SIGKILLed at iteration 8 (once per run); torchrun restarts
    # the worker group on both nodes in the same allocation and the bootstrap hands every rank
    # the iteration-5 checkpoint. Before the fix (a fresh store per attempt, job/preemption.py) the
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
    assert sorted(a["rank"] for a in runs) == [0, 1], runs
    assert {a["world_size"] for a in runs} == {2} and len({a["host"] for a in runs}) == 2, runs
    # TORCHELASTIC_RESTART_COUNT is per node: 1 where the rank died, 0 or 1 on the other node.
    assert max(a["torchrun_restart"] for a in runs) == 1, runs
    assert {a["started_from"] for a in runs} == {5}, runs
    assert {a["reached"] for a in runs} == {12}
    # The preflight's rank check ran before each attempt: the first and the restarted one.
    assert len(re.findall(r"hpctrain: preflight: all 2 ranks met in [\d.]+ s", log)) == 2, log
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
    assert rank1["node"] in _hostnames(info["NodeList"]), (rank1, info["NodeList"])
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
                             "args=[--iterations,4,--sleep,0.1]", procs=2)
    wait_for_job(job_id, timeout=300, states=("RUNNING",))
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


def _hostnames(nodelist: str) -> list[str]:
    return subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                          text=True, check=True).stdout.split()


def _exclusive_site(tmp_path, monkeypatch) -> str:
    """The test cluster's site with --exclusive: no one else's job on a node while it is cut off."""
    sites = tmp_path / "sites"
    sites.mkdir()
    site = (ROOT / "site_configs" / "localcluster.yaml").read_text()
    site = site.replace("name: localcluster", "name: exclusive")
    site += "sbatch_extra: [--exclusive]\n"
    (sites / "exclusive.yaml").write_text(site)
    monkeypatch.setenv("HPCTRAIN_SITE_PATH", str(sites))
    return "exclusive"


def _held_in_setup(flag, started=None) -> str:
    """A setup line that holds every run before its preflight until FLAG exists (at most 120 s),
    touching STARTED first when given."""
    touch = f"touch {started}; " if started else ""
    return f'setup=["{touch}for _ in $(seq 600); do [ -e {flag} ] && break; sleep 0.2; done"]'


@contextmanager
def _cut_off(head: str, victim: str):
    """VICTIM cannot open a connection to HEAD's rendezvous ports (61000-65534) meanwhile."""
    head_ip = f"10.231.0.{10 + int(head.removeprefix('node'))}"
    ns = ["nsenter", f"--net=/run/netns/hpct-{victim}"]
    subprocess.run(ns + ["ip", "rule", "add", "to", head_ip, "ipproto", "tcp", "dport", "61000-65534",
                         "prohibit", "priority", "100"], check=True)
    try:
        yield
    finally:
        subprocess.run(ns + ["ip", "rule", "del", "priority", "100"], check=True)


def _settled(job_id: str, timeout: float = 120) -> dict[str, str]:
    """Slurm's record once the job has ended and nothing of it runs any more (not COMPLETING):
    a batch shell that requeues its job does so before that."""
    def done():
        out = subprocess.run(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T"],
                             capture_output=True, text=True).stdout.split()
        return out and out[0] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
    wait_until(done, timeout, "the job to end and finish completing", job_id)
    return job_state(job_id)


def test_node_cut_off_is_excluded_on_requeue_and_the_job_completes_elsewhere(cli, cluster, tmp_path,
                                                                             monkeypatch):
    """Issue 12, item 4. (Before: the preflight named the node and the job failed; now the
    failure that names a node is requeued without it.) One node of a 2-node job cannot reach
    the head's rendezvous ports: the preflight names it, the batch shell requeues the job with
    that node in ExcNodeList, and the job completes on two other nodes."""
    flag = tmp_path / "go"
    job_id, run_dir = submitted(cli(
        "submit", JOB, "--site", _exclusive_site(tmp_path, monkeypatch), "--set", f"python={sys.executable}",
        "--set", "launcher.preflight_timeout=10", "--set", "args=[--iterations,6,--sleep,0.2]",
        "--set", ONE_PER_NODE, "--set", _held_in_setup(flag)).stdout)
    info = wait_for_job(job_id, timeout=300, states=("RUNNING",))
    head, victim = _hostnames(info["NodeList"])
    with _cut_off(head, victim):
        flag.touch()
        info = wait_for_job(job_id, timeout=400, states=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"))
    log = slurm_log(run_dir)
    assert info["JobState"] == "COMPLETED", log[-4000:]
    assert info["Restarts"] == "1", info
    assert victim in _hostnames(info["ExcNodeList"]), info
    assert victim not in _hostnames(info["NodeList"]), info
    # The failure line joins every node's report in srun's output order: the victim's own
    # ("node2: cannot reach the head …") or the head's ("node2 did not reach the head …") first.
    assert re.search(rf"hpctrain: failure: preflight failed: [^\n]*\b{victim}\b:? (cannot|did not) reach "
                     r"the head", log), log
    assert re.search(rf"hpctrain: recovery: preflight failure, excluding {victim}: requeueing job "
                     rf"{job_id} without {victim}", log), log
    runs = attempts(run_dir)
    assert len(runs) == 2 and victim not in {a["host"] for a in runs}, runs
    excluded = json.loads((run_dir / "status" / "excluded.json").read_text())
    assert [(e["node"], e["reason"]) for e in excluded] == [(victim, "preflight")], excluded
    assert victim in excluded[0]["message"]
    status = cli("status", str(run_dir)).stdout
    assert re.search(rf"^excluded  {victim}: preflight: ", status, re.M), status
    # The first attempt's failure is kept in the archive; the run itself succeeded.
    assert not (run_dir / "status" / "failure.json").exists()
    [earlier] = [json.loads(line) for line in (run_dir / "status" / "failures.jsonl").read_text().splitlines()]
    assert earlier["reason"] == "preflight" and earlier["nodes"] == [victim], earlier


def test_user_scancel_ends_the_run_without_requeue(cli, cluster):
    """Issue 12, item 2, the other way: SIGTERM from the user's scancel is "save now" too, but
    Slurm's view of the job (cancelled) means the run ends; nothing requeues it."""
    job_id, run_dir = submit(cli, cluster, "args=[--iterations,400,--sleep,0.5,--save-every,5]")
    wait_for_checkpoint(run_dir, job_id)
    subprocess.run(["scancel", str(job_id)], check=True)
    info = wait_for_job(job_id, timeout=120)
    assert info["JobState"] == "CANCELLED", info
    assert info["Restarts"] == "0", info
    log = slurm_log(run_dir)
    assert "requeueing job" not in log, log[-3000:]
    assert re.search(r"hpctrain: preemption: SIGTERM and the scheduler is ending the job \(cancelled, "
                     r"or its time limit\): not requeueing", log), log[-3000:]
    # The ranks took the SIGTERM as "save now" (rank/end/stop.py notes it).
    assert list((run_dir / "status").glob("stop-*.json")), sorted((run_dir / "status").iterdir())
    failure = run_dir / "status" / "failure.json"
    if failure.exists():  # when the shell wrote it inside Slurm's KillWait
        assert json.loads(failure.read_text())["reason"] == "cancelled"
    assert job_state(job_id).get("Restarts") in ("0", None)


def test_scancel_during_the_preflight_ends_the_job_without_requeue(cli, cluster, tmp_path, monkeypatch):
    """A cancel while the preflight step runs fails that step too. The batch shell used to take
    it for a preflight failure and requeue the job: a cancelled job came back (seen in CI). Now
    Slurm's view of the job decides first: cancelled, not requeued."""
    flag = tmp_path / "go"
    job_id, run_dir = submitted(cli(
        "submit", JOB, "--site", _exclusive_site(tmp_path, monkeypatch), "--set", f"python={sys.executable}",
        "--set", "args=[--iterations,6,--sleep,0.2]", "--set", ONE_PER_NODE,
        "--set", _held_in_setup(flag)).stdout)
    info = wait_for_job(job_id, timeout=300, states=("RUNNING",))
    head, victim = _hostnames(info["NodeList"])
    # The victim cannot reach the head: the preflight step waits (up to its 60 s) until the cancel.
    with _cut_off(head, victim):
        flag.touch()
        wait_until(lambda: "preflight: 2 nodes must reach" in slurm_log(run_dir), 120, "the preflight", job_id)
        wait_until(lambda: "StepId=" in subprocess.run(
            ["scontrol", "-o", "show", "step", str(job_id)], capture_output=True, text=True).stdout,
            60, "the preflight step", job_id)
        subprocess.run(["scancel", str(job_id)], check=True)
        info = _settled(job_id)
    log = slurm_log(run_dir)
    assert info["JobState"] == "CANCELLED", log[-3000:]
    assert info["Restarts"] == "0", info
    assert "requeueing job" not in log and "recovery:" not in log, log[-3000:]
    assert re.search(r"hpctrain: preemption: SIGTERM and the scheduler is ending the job \(cancelled, "
                     r"or its time limit\): not requeueing", log), log[-3000:]
    failure = run_dir / "status" / "failure.json"
    if failure.exists():  # when the shell wrote it inside Slurm's KillWait
        assert json.loads(failure.read_text())["reason"] == "cancelled"


def test_scancel_before_the_ranks_start_ends_the_job_without_a_preflight(cli, cluster, tmp_path):
    """A cancel during the job's setup lines: the batch shell notes the SIGTERM, and once the
    setup returns it neither runs the preflight nor launches; it ends, not requeued."""
    flag, started = tmp_path / "go", tmp_path / "started"
    job_id, run_dir = submit(cli, cluster, "args=[--iterations,6,--sleep,0.2]", _held_in_setup(flag, started))
    wait_until(started.exists, 300, "the setup", job_id)
    subprocess.run(["scancel", str(job_id)], check=True)
    flag.touch()
    info = _settled(job_id)
    log = slurm_log(run_dir)
    assert info["JobState"] == "CANCELLED", log[-3000:]
    assert info["Restarts"] == "0", info
    assert "hpctrain: preemption: SIGTERM received before the ranks started" in log, log[-3000:]
    assert "nodes must reach" not in log and "hpctrain: launch:" not in log, log[-3000:]
    assert "requeueing job" not in log, log[-3000:]
    failure = run_dir / "status" / "failure.json"
    if failure.exists():  # when the shell wrote it inside Slurm's KillWait
        assert json.loads(failure.read_text())["reason"] == "cancelled"


def test_rank_blocked_in_a_collective_is_named_and_its_node_left_out(cli, cluster, tmp_path, monkeypatch):
    """Issue 12, item 3 and issue 29, item 6: rank 1 (of 2, one per node) blocks forever in a
    receive nobody answers, rank 0 waits for it in its next all-reduce. After launcher.hang_timeout without
    progress the watcher ends the ranks on both nodes (a stack dump first); their stacks single
    out rank 1, the one not in the all-reduce, and its node. The batch shell requeues the job
    without that node, the requeued run resumes from the newest checkpoint and completes, and
    `status` tells the story: the hang, the node left out, the completion."""
    job_id, run_dir = submitted(cli(
        "submit", JOB, "--site", _exclusive_site(tmp_path, monkeypatch), "--set", f"python={sys.executable}",
        "--set", "script=tests/programs/hang_once.py",
        "--set", "args=[--iterations,12,--sleep,0.3,--hang-at,5,--hang-rank,1]", "--set", ONE_PER_NODE,
        "--set", "launcher.hang_timeout=15", "--set", "launcher.max_restarts=0").stdout)
    info = wait_for_job(job_id, timeout=400)
    log = slurm_log(run_dir)
    assert info["JobState"] == "COMPLETED", log[-4000:]
    assert info["Restarts"] == "1", info
    assert (run_dir / "results" / "hung-once").exists()
    assert re.search(r"hpctrain: hang: no rank has progressed for 15 s: ending the ranks", log), log
    [hang] = [json.loads(line) for line in (run_dir / "status" / "failures.jsonl").read_text().splitlines()]
    assert hang["reason"] == "hang", hang
    culprit = hang["nodes"]
    assert len(culprit) == 1 and re.fullmatch(r"node\d", culprit[0]), hang
    [node] = culprit
    # Its progress alone singles it out here (one iteration behind the other).
    assert f"stuck rank 1 on {node} at iteration 5" in hang["message"], hang
    assert [(r["rank"], r["node"]) for r in hang["ranks"]] == [(1, node)], hang
    rank1 = (run_dir / "logs" / "rank-1.log").read_text(errors="replace")
    assert "blocking forever at iteration 5" in rank1
    # The stack dump the watcher asked for (SIGQUIT, faulthandler) before ending it.
    assert re.search(r"(Current thread|Thread) 0x[0-9a-f]+", rank1) and "hang_once.py\", line" in rank1, rank1[-3000:]
    # Requeued without the culprit's node, resumed from rank 0's newest checkpoint.
    assert node in _hostnames(info["ExcNodeList"]) and node not in _hostnames(info["NodeList"]), info
    runs = attempts(run_dir)
    assert sorted(a["rank"] for a in runs) == [0, 1], runs
    assert {a["job_restart"] for a in runs} == {1} and node not in {a["host"] for a in runs}, runs
    assert {a["started_from"] for a in runs} == {6}, runs
    assert not (run_dir / "status" / "failure.json").exists()
    status = cli("status", str(run_dir)).stdout
    assert re.search(rf"^attempt 1 hang: .*stuck rank 1 on {node}\b.*; requeued without {node}$", status, re.M), status
    assert re.search(r"^now +COMPLETED", status, re.M), status
    assert re.search(rf"^excluded  {node}: hang: ", status, re.M), status


TRACKED = """\
import json, os, signal, socket, time
import wandb
from hpctrain_progress import report
from torch.utils.tensorboard import SummaryWriter

VERSION = "as submitted"
stop = {"flag": False}
signal.signal(signal.SIGUSR2, lambda *_: stop.update(flag=True))
run_dir = os.environ["HPCTRAIN_RUN_DIR"]
os.makedirs(os.path.join(run_dir, "checkpoints"), exist_ok=True)
start = 0
if os.environ.get("HPCTRAIN_RESUME_FROM"):
    start = json.load(open(os.environ["HPCTRAIN_RESUME_FROM"]))["next"]
run = wandb.init(project="hpctrain-test", mode="offline")  # id, resume, dir: hpctrain's env
tb = SummaryWriter(os.environ["HPCTRAIN_TENSORBOARD_DIR"])
it = start
while it < 30 and not stop["flag"]:
    it += 1
    run.log({"x": it}, step=it)
    tb.add_scalar("x", it, it)
    report(it)
    path = os.path.join(run_dir, "checkpoints", f"step_{it:06d}.json")
    json.dump({"next": it}, open(path + ".tmp", "w"))
    os.replace(path + ".tmp", path)
    time.sleep(0.5)
with open(os.path.join(run_dir, "results.jsonl"), "a") as f:
    f.write(json.dumps({"version": VERSION, "wandb_id": run.id, "wandb_dir": run.dir,
                        "started_from": start, "reached": it, "cwd": os.getcwd(),
                        "restart": int(os.environ.get("SLURM_RESTART_COUNT", 0))}) + "\\n")
tb.close()
run.finish()
"""


def test_requeued_run_runs_its_snapshot_and_continues_its_tracking(cli, cluster, tmp_path):
    """Issue 12, items 5 and 6: the job runs the copy of its code taken at submit (the script
    edited after submit changes nothing), and both attempts log into the same W&B run (offline)
    and the run directory's TensorBoard directory."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(TRACKED)
    (work / "notes.log").write_text("ignored\n")
    (work / ".gitignore").write_text("*.log\n")
    (work / "job.yaml").write_text(
        "name: tracked\nscript: train.py\nresources: {nodes: 1}\n"
        "env: {WANDB_MODE: offline, WANDB_SILENT: 'true'}\n"
        "preemption: {max_requeues: 1}\n")
    out = cli("submit", "job.yaml", "--site", cluster, "--set", f"python={sys.executable}",
              cwd=work).stdout
    job_id, run_dir = submitted(out)
    record = json.loads((run_dir / "run.json").read_text())["snapshot"]
    assert record["method"] == "directory" and record["files"] == 3, record  # no notes.log
    assert (run_dir / "code" / "train.py").read_text() == TRACKED
    # Edited in the working tree after submit: a run of the live tree would record this.
    (work / "train.py").write_text(TRACKED.replace('"as submitted"', '"edited later"'))
    wait_until(lambda: len(list((run_dir / "checkpoints").glob("step_*.json"))) >= 3, 240,
               "three checkpoints", job_id)
    preempt(job_id)
    info = wait_for_job(job_id, timeout=400)
    log = slurm_log(run_dir)
    assert info["JobState"] == "COMPLETED", log[-4000:]
    assert info["Restarts"] == "1", info
    first, second = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert first["version"] == second["version"] == "as submitted", (first, second)
    assert first["cwd"] == second["cwd"] == str(run_dir / "code")
    assert second["started_from"] == first["reached"] > 0 and second["reached"] == 30
    wandb_id = run_dir.name.lower()
    assert first["wandb_id"] == second["wandb_id"] == wandb_id, (first, second)
    offline = sorted((run_dir / "wandb").glob(f"offline-run-*-{wandb_id}"))
    assert len(offline) == 2, sorted((run_dir / "wandb").iterdir())
    events = list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 2, events


def test_submit_resume_starts_an_ended_run_again_from_its_checkpoint(cli, cluster):
    """Issue 12, item 7: a run that ended (here: preempted with requeue off) is started again
    by `hpctrain submit --resume RUN`: a new job, the same run directory, from the checkpoint
    saved on the signal."""
    job_id, run_dir = submit(cli, cluster, "args=[--iterations,24,--sleep,0.3,--save-every,5]",
                             "preemption.requeue=false")
    wait_for_checkpoint(run_dir, job_id)
    preempt(job_id)
    info = wait_for_job(job_id, timeout=300)
    assert info["JobState"] == "FAILED" and info["ExitCode"] == "75:0", info
    first = attempts(run_dir)
    saved = {a["reached"] for a in first}
    assert len(saved) == 1 and {a["stopped"] for a in first} == {"preempted"}, first
    saved_at = saved.pop()
    out = cli("submit", "--resume", run_dir.name).stdout
    m = re.search(rf"^resumed resumable-train  run {run_dir.name}  job (\d+)  on {cluster}$", out, re.M)
    assert m, out
    new_job = m.group(1)
    assert new_job != job_id
    info = wait_for_job(new_job, timeout=300)
    assert info["JobState"] == "COMPLETED", slurm_log(run_dir)[-4000:]
    second = [a for a in attempts(run_dir) if a not in first]
    assert len(second) == 2 and {a["started_from"] for a in second} == {saved_at}, second
    assert {a["reached"] for a in second} == {24}
    record = json.loads((run_dir / "run.json").read_text())
    assert record["job_id"] == new_job and record["jobs"] == [job_id], record
    assert json.loads((run_dir / "status" / "failures.jsonl").read_text().splitlines()[0])["reason"] == "preempted"
    assert not (run_dir / "status" / "failure.json").exists()
    status = cli("status", run_dir.name).stdout
    assert f"earlier   job(s) {job_id} (submit --resume)" in status and "COMPLETED" in status, status

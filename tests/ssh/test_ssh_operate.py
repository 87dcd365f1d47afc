"""Following, debugging, stopping and restarting runs on ssh hosts (site locallab: the local
cluster's real sshds, no scheduler) — the same commands as for Slurm runs."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import yaml

from tests.conftest import ROOT, submitted
from tests.e2e.test_rl_training import write_failing_program
from tests.operate_helpers import job_file, results, wait_state
from tests.slurm.survive import attempts
from tests.ssh.helpers import (close_connections, ip_rule, job_log, lab_site, leftovers, netns,
                               status_of, wait_done, wait_for)

RESUMABLE = "examples/resumable_train.yaml"


def test_status_logs_list_and_wait(cli, lab, tmp_path):
    jf = job_file(tmp_path, "ssh-follow", nodes=2, procs=1, args=["--seconds", "6"])
    job_id, run_dir = submitted(cli("submit", jf, "--site", lab).stdout)
    st = wait_state(cli, run_dir.name, {"RUNNING", "COMPLETED"})
    if st["state"]["state"] == "RUNNING":
        assert st["state"]["nodes"] == "node[5-6]"
        text = cli("status", run_dir.name, cwd=tmp_path).stdout  # by run id, from elsewhere
        assert "RUNNING" in text and "2 node(s) x 1 rank(s)" in text
    follow = cli("logs", job_id, "-f", timeout=300, cwd=tmp_path)  # by job id; returns at the end
    assert "[rank 0] rank 0 done" in follow.stdout and "[rank 1] rank 1 done" in follow.stdout
    assert "done: all ranks exited 0" in follow.stdout
    st = status_of(cli, run_dir)
    assert st["state"]["state"] == "COMPLETED" and st["state"]["exit_code"] == 0
    one = cli("logs", job_id, "--rank", "1").stdout
    assert "rank 1 done" in one and "rank 0" not in one
    by_node = cli("logs", job_id, "--node", "node6").stdout  # the site's name for the host
    assert "rank 1 done" in by_node and "rank 0 done" not in by_node
    assert {r["host"] for r in results(run_dir)} == {"node5", "node6"}
    bad = cli("logs", job_id, "--node", "node9", check=False)
    assert bad.returncode == 2 and "nodes of this run: node5, node6" in bad.stderr
    assert "ssh-follow" in cli("list").stdout
    assert any(r["run_id"] == run_dir.name and r["state"]["state"] == "COMPLETED"
               for r in json.loads(cli("list", "--json").stdout))
    # (`submit --wait` on this site: tests/ssh/test_ssh_training.py, every run)


def test_failed_rank_stops_the_other_hosts_and_is_named(cli, lab, tmp_path):
    # Rank 1 (node6) exits 3; rank 0 (node5) would sleep for an hour.
    script = write_failing_program(tmp_path, "RANK").rename(tmp_path / "fail_rank.py")
    jf = job_file(tmp_path, "ssh-fail", nodes=2, procs=1)
    doc = yaml.safe_load(jf.read_text())
    doc["script"] = str(script)
    jf.write_text(yaml.safe_dump(doc))
    proc = cli("submit", jf, "--site", lab, "--wait", check=False, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "failed: rank 1 on node6 exit 3: exit status 3" in proc.stdout
    job_id, run_dir = submitted(proc.stdout)
    st = status_of(cli, job_id)
    assert st["state"]["state"] == "FAILED"
    assert st["ended"].startswith("ranks: rank 1 on node6 failed (exit status 3)"), st
    assert "rank 1 on node6 exit 3" in cli("status", job_id).stdout
    log = job_log(run_dir)
    assert "hpctrain: node6: its step ended with status 1: stopping the other hosts" in log
    assert "slept through" not in log
    assert leftovers(run_dir) == {"node5": [], "node6": []}


def test_killed_rank_stops_the_run_and_is_named(cli, lab):
    job_id, run_dir = submitted(cli("submit", RESUMABLE, "--site", lab, "--set",
                                    f"python={sys.executable}", "--set", "resources.procs_per_node=1",
                                    "--set", "args=[--iterations,400,--sleep,0.3]").stdout)
    rank1 = run_dir / "logs" / "rank-1.log"
    wait_for(lambda: rank1.exists() and "starting at iteration" in rank1.read_text(), 300,
             "rank 1 to train")
    ident = json.loads((run_dir / "status" / "rank-1.json").read_text())
    assert ident["node"] == "node6"
    os.kill(ident["pid"], signal.SIGKILL)  # the test cluster's machines share one process table
    st = wait_done(cli, job_id, timeout=300)
    assert st["state"]["state"] == "FAILED"
    assert st["ended"].startswith("ranks: rank 1 on node6 was killed: Signal 9 (SIGKILL)"), st
    assert leftovers(run_dir) == {"node5": [], "node6": []}
    assert not (run_dir / "results" / "rank-0.json").exists()  # stopped, not finished


def test_cancel_stops_every_process_on_every_host(cli, lab, tmp_path):
    jf = job_file(tmp_path, "ssh-cancel", nodes=2, procs=1, args=["--seconds", "300"])
    job_id, run_dir = submitted(cli("submit", jf, "--site", lab).stdout)
    wait_for(lambda: len(list((run_dir / "status").glob("rank-*.json"))) == 2, 120, "2 ranks")
    pids = [json.loads(p.read_text())["pid"] for p in (run_dir / "status").glob("rank-*.json")]
    running = leftovers(run_dir)
    assert running["node5"] and running["node6"]
    out = cli("cancel", run_dir.name).stdout
    assert "CANCELLED" in out
    st = status_of(cli, job_id)
    assert st["state"]["state"] == "CANCELLED" and st["ended"] is None  # cancelled, not failed
    assert leftovers(run_dir) == {"node5": [], "node6": []}
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or \
            open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    again = cli("cancel", run_dir.name)  # a finished run: nothing to do, no error
    assert "CANCELLED" in again.stdout


def test_run_goes_on_when_the_submitting_terminal_closes(cli, lab, tmp_path):
    # `hpctrain submit --wait` in a session of its own, like a terminal; the terminal closes
    # (SIGHUP to its processes) while the job runs. The run goes on; `status` picks it up.
    jf = job_file(tmp_path, "ssh-hangup", nodes=2, procs=1, args=["--seconds", "12"])
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, "-m", "hpctrain", "submit", str(jf), "--site", lab,
                             "--wait"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            # as in a terminal's shell: a test runner started under nohup
                            # would hand its ignored SIGHUP down
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "RUNNING" in line:
            break
    _, run_dir = submitted("".join(lines))
    os.killpg(proc.pid, signal.SIGHUP)
    assert proc.wait(timeout=30) == -signal.SIGHUP
    assert status_of(cli, run_dir.name)["state"]["state"] == "RUNNING"
    st = wait_done(cli, run_dir.name, timeout=300)
    assert st["state"]["state"] == "COMPLETED", job_log(run_dir)
    assert sorted(r["rank"] for r in results(run_dir)) == [0, 1]


def test_torchrun_restart_resumes_from_the_newest_checkpoint(cli, lab):
    # Rank 1 is SIGKILLed at iteration 8; launcher.max_restarts=1: torchrun restarts the worker
    # group on both hosts and every rank resumes from the iteration-5 checkpoint.
    proc = cli("submit", RESUMABLE, "--site", lab, "--set", f"python={sys.executable}",
               "--set", "launcher.max_restarts=1", "--set", "resources.procs_per_node=1", "--set",
               "args=[--iterations,12,--sleep,0.3,--save-every,5,--die-at,8,--die-rank,1]",
               "--wait", check=False, timeout=600)
    _, run_dir = submitted(proc.stdout)
    log = job_log(run_dir)
    assert proc.returncode == 0, log[-4000:]
    assert (run_dir / "results" / "killed-rank-1-at-8").exists()
    runs = attempts(run_dir)
    assert sorted(a["rank"] for a in runs) == [0, 1], runs
    assert {a["host"] for a in runs} == {"node5", "node6"}
    assert max(a["torchrun_restart"] for a in runs) == 1, runs
    assert {a["started_from"] for a in runs} == {5} and {a["reached"] for a in runs} == {12}
    assert len(re.findall(r"hpctrain: preflight: all 2 ranks met in [\d.]+ s", log)) == 2, log


def test_preflight_names_a_host_that_cannot_reach_the_head(cli, lab, sites):
    # node6 cannot open a connection to node5's rendezvous port (ssh, port 22, still works):
    # the preflight stops the job within launcher.preflight_timeout and names node6, instead of
    # torchrun waiting for its join_timeout.
    # The run's port is fixed (below Slurm's 61000-65534) and only it is blocked: Slurm jobs of
    # the e2e tier may run on node5 and node6 meanwhile (scripts/test-all.sh), and their
    # rendezvous must not be cut too.
    port = 60998
    lab_site(sites, "lab-port", port={"fixed": port})
    with ip_rule("node6", ["to", "10.231.0.15", "ipproto", "tcp", "dport", str(port),
                           "prohibit"], 100):
        proc = cli("submit", RESUMABLE, "--site", "lab-port", "--set", f"python={sys.executable}",
                   "--set", "launcher.preflight_timeout=10", "--wait", check=False, timeout=300)
    _, run_dir = submitted(proc.stdout)
    log = job_log(run_dir)
    assert proc.returncode != 0, log
    # The check runs in the launch step, before torchrun: no torchrun started, so no rank did.
    assert "preflight: 2 nodes must reach" in log and "(in the launch step)" in log, log
    assert not list(run_dir.glob("logs/rank-*.log")), sorted(run_dir.glob("logs/*"))
    assert re.search(r"hpctrain: error: preflight failed \(status \d+\): .*node6", log), log
    assert "within 10 s (preflight_timeout)" in log
    failure = json.loads((run_dir / "status" / "failure.json").read_text())
    assert failure["reason"] == "preflight" and "node6" in failure["message"], failure
    assert leftovers(run_dir) == {"node5": [], "node6": []}


def test_sweep_runs_its_tasks_on_the_hosts_with_ports_of_their_own(cli, lab, tmp_path):
    jf = job_file(tmp_path, "ssh-sweep", nodes=2, procs=1, args=["--seconds", "4"],
                  sweep={"grid": {"env.LR": [0.1, 0.01]}, "parallel": 2})
    proc = cli("submit", jf, "--site", lab, "--wait", timeout=600)
    job_id, run_dir = submitted(proc.stdout)
    assert "2 completed" in proc.stdout
    res = results(run_dir)
    assert sorted((r["lr"], r["rank"]) for r in res) == [("0.01", 0), ("0.01", 1), ("0.1", 0), ("0.1", 1)]
    # The two tasks ran at once on the same hosts: each claimed a port of its own on node5.
    assert len({r["port"] for r in res}) == 2
    st = status_of(cli, job_id)
    assert st["state"]["state"] == "COMPLETED" and len(st["state"]["tasks"]) == 2
    assert "rank 1 done" in cli("logs", run_dir.name, "--task", "1").stdout


def _ssh_connections(to: str, where: list[str] = (), tag: str = "/tmp/hpctrain-ssh-") -> int:
    """Established TCP connections to `to`'s port 22, seen from this machine or (where) a node,
    held by an ssh whose command line names `tag` (its ControlPath: hpctrain's, or one run's)."""
    out = subprocess.run([*where, "ss", "-Htnp", "state", "established", "dst", to, "dport", "=", ":22"],
                         capture_output=True, text=True, check=True).stdout
    count = 0
    for pid in re.findall(r"pid=(\d+)", out):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                count += tag.encode() in f.read()
        except OSError:
            pass
    return count


def test_one_ssh_connection_per_host_however_many_commands(cli, lab, tmp_path):
    # submit probes and starts, status asks, logs reads, the head's batch shell runs the
    # preflight and the launch on node6: each side holds ONE connection to each host it uses.
    close_connections()
    node5, node6 = "10.231.0.15", "10.231.0.16"
    jf = job_file(tmp_path, "ssh-conns", nodes=2, procs=1, args=["--seconds", "20"])
    job_id, run_dir = submitted(cli("submit", jf, "--site", lab).stdout)
    try:
        wait_for(lambda: (run_dir / "logs" / "rank-1.log").exists(), 120, "rank 1 to start")
        for _ in range(3):
            assert status_of(cli, job_id)["state"]["state"] == "RUNNING"
        cli("logs", job_id)
        assert _ssh_connections(node5) == 1 and _ssh_connections(node6) == 1
        tag = subprocess.run(["cksum"], input=str(run_dir), capture_output=True,
                             text=True).stdout.split()[0]
        assert _ssh_connections(node6, netns("node5"), f"/tmp/hpctrain-ssh-{os.getuid()}/{tag}-") == 1
    finally:
        cli("cancel", job_id)
    assert leftovers(run_dir) == {"node5": [], "node6": []}

"""Watching runs on the real local Slurm cluster: a 2-node training shows its progress in
`submit --wait`; a preempted, requeued and resumed training plots on one continuous step axis;
`hpctrain tensorboard` on the login node serves the run to a laptop through the printed ssh
forward."""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
import threading
import urllib.parse

import pytest

from tests.conftest import ROOT, submitted, wait_for_job
from tests.slurm.survive import attempts, preempt, slurm_log, wait_for_checkpoint

CLUSTER = ROOT / "tests" / "cluster"


def test_two_node_training_shows_progress_in_wait_output(cli, cluster):
    proc = cli("submit", "examples/cartpole_ppo.yaml", "--site", cluster, "--wait", "--ranks",
               "--set", "resources.nodes=2", "--set", "resources.procs_per_node=1",
               "--set", "args=[--updates,30]",
               "--set", f"python={sys.executable}", timeout=600)
    lines = proc.stdout.splitlines()
    done = next(i for i, line in enumerate(lines) if ": COMPLETED" in line)
    running = [line for line in lines[:done] if ": RUNNING" in line and "step " in line]
    assert running, proc.stdout  # progress was shown while the job ran, not only at its end
    assert "reward " in running[0] and " on node[1-2]" in running[0], running[0]
    assert "step 30 " in lines[done] and "reward " in lines[done], lines[done]  # the last update
    nodes = {line.split(" on ")[1].split(":")[0] for line in lines if line.startswith("  rank ")}
    assert nodes == {"node1", "node2"}, proc.stdout  # every rank's progress, named by its node


ITERATIONS = 20


@pytest.fixture(scope="module")
def preempted_run(cluster, tmp_path_factory):
    """A 2x1 DDP training preempted after its first checkpoint, requeued, resumed to the end
    (ITERATIONS in all: the signal lands after the first checkpoint, at 5, with ~7 s left)."""
    from tests.conftest import Cli
    home = tmp_path_factory.mktemp("watch-home")
    env = {"HPCTRAIN_HOME": str(home / "home"), "HPCTRAIN_RUNS_DIR": str(home / "runs")}
    proc = Cli()("submit", "examples/resumable_train.yaml", "--site", cluster,
                 "--set", f"python={sys.executable}", "--set", "resources.procs_per_node=1",
                 "--set", f"args=[--iterations,{ITERATIONS},--sleep,0.5,--save-every,5]", env=env)
    job_id, run_dir = submitted(proc.stdout)
    wait_for_checkpoint(run_dir, job_id)
    preempt(job_id)
    info = wait_for_job(job_id, timeout=400)
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", slurm_log(run_dir)[-4000:]
    return job_id, run_dir, env


def test_preempted_and_resumed_run_plots_on_one_step_axis(preempted_run, tmp_path):
    from tests.conftest import Cli
    job_id, run_dir, env = preempted_run
    saved_at = {a["reached"] for a in attempts(run_dir) if a["job_restart"] == 0}.pop()
    png = tmp_path / "loss.png"
    out = Cli()("plot", job_id, "--metric", "train/loss", "--out", png, env=env).stdout
    assert f"train/loss {ITERATIONS} points, steps 1-{ITERATIONS}, 2 attempt(s) starting at step 1, {saved_at + 1}" in out, out
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"

    from hpctrain.follow.curves import read_run
    [scalars] = read_run(str(run_dir))
    assert len(scalars.groups) == 2  # two writers, one per attempt, one after the other
    curve = scalars.curve("train/loss")
    # One continuous axis: every iteration once, in order, across the requeue; the second
    # attempt starts right after the step its checkpoint was saved at.
    assert curve.steps == list(range(1, ITERATIONS + 1)), curve.steps
    assert curve.attempt_starts == [1, saved_at + 1]
    assert 1 < saved_at < ITERATIONS

    data = json.loads(Cli()("status", job_id, "--json", env=env).stdout)
    [p] = data["progress"]
    assert (p["step"], p["attempt"]) == (ITERATIONS, 1) and "loss" in p["metrics"], p


def test_tensorboard_on_the_login_node_serves_the_run_to_a_laptop(preempted_run):
    job_id, run_dir, env = preempted_run
    info = dict(line.split("=", 1) for line in subprocess.run(
        ["bash", CLUSTER / "ssh-info.sh"], capture_output=True, text=True, check=True).stdout.splitlines())
    config = shlex.split(info["HPCTRAIN_CLUSTER_SSH_CONFIG"])[0]
    # On login (its own network namespace, the shared file system), as a user would start it.
    remote = (f"cd {shlex.quote(str(ROOT))} && echo PID $$ && exec {shlex.quote(sys.executable)} "
              f"-m hpctrain tensorboard {shlex.quote(str(run_dir))}")
    board = subprocess.Popen(["ssh", "-F", config, "login", remote], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    stuck = threading.Timer(300, board.kill)  # never a test that hangs on a silent TensorBoard
    stuck.start()
    forward = pid = None
    try:
        pid = board.stdout.readline().split()[1]
        said = [board.stdout.readline() for _ in range(5)]
        assert said[0].startswith("TensorBoard http://127.0.0.1:"), said
        port = int(said[0].split(":")[2].split("/")[0])
        line = next(s.strip() for s in said if s.strip().startswith("ssh -N -L"))
        assert line == f"ssh -N -L {port}:127.0.0.1:{port} root@login", said
        # The printed line, run on the laptop as it is (plus: fail at once if it cannot forward).
        forward = subprocess.Popen(["bash", CLUSTER / "on-laptop.sh", *shlex.split(line)[:1],
                                    "-o", "ExitOnForwardFailure=yes", *shlex.split(line)[1:]],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        fetch = (
            "import json, sys, time, urllib.request\n"
            "deadline = time.monotonic() + 120\n"
            "while True:\n"
            "    try:\n"
            "        with urllib.request.urlopen(sys.argv[1], timeout=10) as r:\n"
            "            data = json.load(r)\n"
            "        if data or time.monotonic() > deadline: break\n"
            "    except OSError:\n"
            "        if time.monotonic() > deadline: raise\n"
            "    time.sleep(0.5)\n"
            "print(json.dumps(data))\n")
        base = f"http://127.0.0.1:{port}/data/plugin/scalars"

        def on_laptop_get(url: str):
            proc = subprocess.run(["bash", CLUSTER / "on-laptop.sh", sys.executable, "-c", fetch, url],
                                  capture_output=True, text=True, timeout=180)
            assert proc.returncode == 0, proc.stderr
            return json.loads(proc.stdout)

        tags = on_laptop_get(f"{base}/tags")
        [run_name] = [r for r, t in tags.items() if "train/loss" in t]
        assert run_name == "tensorboard", tags  # both attempts' event files: one TensorBoard run
        query = urllib.parse.urlencode({"run": run_name, "tag": "train/loss"})
        points = on_laptop_get(f"{base}/scalars?{query}")
        assert [step for _, step, _ in points] == list(range(1, ITERATIONS + 1)), points
    finally:
        stuck.cancel()
        if forward:
            forward.terminate()
            forward.wait(timeout=30)
        if board.poll() is None and pid:
            subprocess.run(["ssh", "-F", config, "login", f"kill {pid}"], timeout=30)
        board.wait(timeout=30)

"""Watching a real run on this machine (the local backend, 2 ranks under torchrun): `submit
--wait` shows progress while the job runs, `status --json/--ranks` and `list` carry it, `plot`
draws the curve from the event file the program wrote, and `hpctrain tensorboard` serves it."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest

from tests.conftest import ROOT, submitted

PROGRAM = ROOT / "tests" / "programs" / "report_progress.py"
NAME = "watch-progress-report-on-this-machine"  # longer than any column used to allow


@pytest.fixture
def job(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(f"name: {NAME}\nlibrary: command\nscript: {PROGRAM}\n"
                    'args: ["--steps", "20", "--hold-at", "3"]\n'
                    f"python: {sys.executable}\nresources: {{procs_per_node: 2}}\n")
    return path


def follow(cmd: list[str], on_line, timeout: float = 300) -> tuple[int, list[str]]:
    """Run `cmd`, calling on_line(line) for each line of its output as it comes."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            on_line(line)
        return proc.wait(), lines
    finally:
        killer.cancel()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def board_process(*args: str) -> subprocess.Popen:
    """`hpctrain tensorboard ARGS`, stopped with Ctrl-C (SIGINT) as a user would. Its SIGINT is
    reset to the default first: a shell that ran this suite in the background (`.ci/run &`)
    ignores SIGINT in everything it starts, and Python then never raises KeyboardInterrupt."""
    return subprocess.Popen([sys.executable, "-m", "hpctrain", "tensorboard", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


def test_wait_status_list_plot_and_tensorboard_follow_a_real_run(cli, job, tmp_path):
    run_dir = []

    def on_line(line: str) -> None:
        if line.startswith("run directory: "):
            run_dir.append(line.split(": ", 1)[1].strip())
        # The ranks hold at step 3 until the test has seen progress in --wait's own output.
        if "RUNNING" in line and "step " in line and "reward" in line and run_dir:
            open(os.path.join(run_dir[0], "release"), "w").close()

    code, lines = follow([sys.executable, "-m", "hpctrain", "submit", str(job), "--wait", "--ranks"], on_line)
    text = "\n".join(lines)
    assert code == 0, text
    running = [line for line in lines if "RUNNING" in line and "step " in line]
    assert running and "reward" in running[0], text
    assert lines.index(running[0]) < next(i for i, line in enumerate(lines) if "COMPLETED" in line)
    assert any(line.startswith("  rank 1 on ") and "reward=" in line for line in lines), text
    final = [line for line in lines if "COMPLETED" in line][-1]
    assert "step 20" in final and "reward 200" in final, text  # the last report was not lost

    run = run_dir[0]
    data = json.loads(cli("status", run, "--json").stdout)
    [p] = data["progress"]
    assert (p["step"], p["min_step"], p["metric"], p["value"], p["attempt"]) == (20, 20, "reward", 200.0, 0)
    assert [r["rank"] for r in p["ranks"]] == [0, 1] and all(r["node"] for r in p["ranks"])
    page = cli("status", run, "--ranks").stdout
    assert "progress  step 20" in page and "reward=200" in page
    listing = cli("list").stdout
    assert NAME in listing and data["run_id"] in listing and "step 20 reward 200" in listing

    out = cli("plot", run, "--metric", "reward", "--out", tmp_path / "curve.png").stdout
    assert "train/reward 20 points, steps 1-20, 1 attempt(s)" in out
    assert out.splitlines()[-1] == str(tmp_path / "curve.png")
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"
    bad = cli("plot", run, "--metric", "nothing-like-it", check=False)
    assert bad.returncode == 2 and "choose from: train/reward" in bad.stderr

    port = free_port()
    board = board_process(run, "--port", str(port))
    try:
        said = [board.stdout.readline() for _ in range(5)]
        assert said[0].startswith(f"TensorBoard http://127.0.0.1:{port}/ serving run "), said
        assert said[1].strip() == "tb" and f"ssh -N -L {port}:127.0.0.1:{port} " in said[3], said
        base = f"http://127.0.0.1:{port}/data/plugin/scalars"
        deadline = time.monotonic() + 120
        while True:  # TensorBoard loads the event files in the background after it starts
            tags = get_json(f"{base}/tags")
            if any("train/reward" in t for t in tags.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        [name] = [r for r, t in tags.items() if "train/reward" in t]
        query = urllib.parse.urlencode({"run": name, "tag": "train/reward"})
        points = get_json(f"{base}/scalars?{query}")
        assert [(step, value) for _, step, value in points] == [(s, 10.0 * s) for s in range(1, 21)]
        board.send_signal(signal.SIGINT)  # Ctrl-C: the normal way to stop it
        assert board.wait(timeout=30) == 0 and "TensorBoard stopped" in board.stdout.read()
    finally:
        if board.poll() is None:
            board.kill()
            board.wait(timeout=30)


def test_tensorboard_of_a_sweep_serves_every_task(cli, tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(f"name: watch-sweep\nlibrary: command\nscript: {PROGRAM}\n"
                    'args: ["--steps", "3"]\n'
                    f"python: {sys.executable}\nresources: {{procs_per_node: 1}}\n"
                    "sweep: {seeds: [1, 2], parallel: 2}\n")
    _, run_dir = submitted(cli("submit", str(path), "--wait", timeout=300).stdout)
    port = free_port()
    board = board_process(str(run_dir), "--port", str(port))
    try:
        said = [board.stdout.readline() for _ in range(3)]
        assert said[0].startswith(f"TensorBoard http://127.0.0.1:{port}/ serving run "), said
        assert [s.strip() for s in said[1:]] == ["tasks/0/tb", "tasks/1/tb"], said
        base = f"http://127.0.0.1:{port}/data/plugin/scalars"
        deadline = time.monotonic() + 120
        while True:  # TensorBoard loads the event files in the background after it starts
            tags = get_json(f"{base}/tags")
            runs = sorted(r for r, t in tags.items() if "train/reward" in t)
            if len(runs) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert runs == ["tasks/0/tb", "tasks/1/tb"], tags  # one TensorBoard run per task
        for name in runs:
            query = urllib.parse.urlencode({"run": name, "tag": "train/reward"})
            points = get_json(f"{base}/scalars?{query}")
            assert [(step, value) for _, step, value in points] == [(1, 10.0), (2, 20.0), (3, 30.0)]
    finally:
        board.send_signal(signal.SIGINT)
        try:
            board.wait(timeout=30)
        except subprocess.TimeoutExpired:
            board.kill()
            board.wait(timeout=30)

"""The ssh backend's job script on this machine alone: a site whose one host is localhost runs
without any ssh (the head's step runs where the batch shell does), so the script's own parts
are tested with real processes here — the port every run claims, and `job.sh stop`."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpctrain.job.load import load_job
from hpctrain.submission import _write_job_dir, prepare

WORKER = Path(__file__).resolve().parents[1] / "programs" / "worker.py"


def one_host_run(tmp_path: Path, name: str, site_extra: str = "", seconds: float = 1) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    site = tmp_path / "here.yaml"
    site.write_text("name: here\nscheduler: ssh\nhosts: [localhost]\ncpu_mode: 'on'\n" + site_extra)
    job = load_job({"name": name, "script": str(WORKER), "python": sys.executable,
                    "args": ["--seconds", str(seconds)], "runs_dir": str(tmp_path / "runs"),
                    # prepare() alone copies no code: the script runs where it is
                    "snapshot": False},
                   site=str(site))
    prep = prepare(job)
    prep.run_dir.mkdir(parents=True)
    _write_job_dir(prep, prep.run_dir)
    return prep.run_dir


def run_tag(run_dir: Path) -> int:
    out = subprocess.run(["cksum"], input=str(run_dir), capture_output=True, text=True).stdout
    return int(out.split()[0])


def derived(tag: int) -> int:
    return 61000 + 2 * (tag % 2268)


def lock_file(port: int) -> Path:
    return Path("/tmp/hpctrain-ports") / f"{socket.gethostname()}-{port}.lock"


def finish(run_dir: Path, timeout: float = 120) -> int:
    """The batch shell, run here in the foreground (as `job.sh start` would detached)."""
    return subprocess.run(["bash", str(run_dir / "job.sh")], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL).returncode


@pytest.fixture
def holder():
    """Holds a port's lock as another run's batch shell would (flock, with its name inside)."""
    procs = []

    def hold(port: int, owner: str):
        path = lock_file(port)
        path.parent.mkdir(exist_ok=True)
        path.write_text(owner + "\n")
        procs.append(subprocess.Popen(["flock", str(path), "sleep", "600"]))
        for _ in range(100):
            if subprocess.run(["flock", "-n", str(path), "true"]).returncode != 0:
                return
            time.sleep(0.05)
        raise AssertionError("the lock was not taken")
    yield hold
    for p in procs:
        p.kill()
        p.wait()


def test_a_port_another_run_holds_or_a_program_listens_on_is_passed_over(home, tmp_path, holder):
    run_dir = one_host_run(tmp_path, "ports")
    tag = run_tag(run_dir)
    holder(derived(tag), "/elsewhere/runs/x/1 (batch shell pid 1)")
    with socket.socket() as listener:  # a program that is not an hpctrain run, on the next one
        listener.bind(("", derived(tag + 1)))
        listener.listen()
        assert finish(run_dir) == 0, (run_dir / "logs" / "job.out").read_text()
    seen = json.loads((run_dir / "results" / "rank-0.json").read_text())
    assert int(seen["port"]) == derived(tag + 2)
    assert lock_file(derived(tag + 2)).read_text().startswith(f"{run_dir} (batch shell pid ")


def test_two_runs_at_once_never_share_a_port(home, tmp_path):
    runs = [one_host_run(tmp_path / str(i), "twins", seconds=3) for i in range(2)]
    procs = [subprocess.Popen(["bash", str(r / "job.sh")], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in runs]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    ports = {json.loads((r / "results" / "rank-0.json").read_text())["port"] for r in runs}
    assert len(ports) == 2


def test_a_fixed_port_another_run_holds_stops_the_job_naming_it(home, tmp_path, holder):
    run_dir = one_host_run(tmp_path, "fixed", "port: {fixed: 29561}\n")
    holder(29561, "/elsewhere/runs/y/2 (batch shell pid 42 since then)")
    proc = subprocess.run(["bash", str(run_dir / "job.sh")], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 1
    assert ("port 29561 is held by another hpctrain run: /elsewhere/runs/y/2 (batch shell pid 42 "
            "since then): cancel that run, or leave port.fixed out of the site") in proc.stderr, proc.stderr
    assert not (run_dir / "results").exists()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_stop_ends_every_process_of_the_run_and_nothing_else(home, tmp_path):
    run_dir = one_host_run(tmp_path, "stopme", seconds=300)
    started = subprocess.run(["bash", str(run_dir / "job.sh"), "start"], capture_output=True,
                             text=True, stdin=subprocess.DEVNULL, timeout=60)
    assert started.stdout.startswith("hpctrain start: pid="), started.stdout + started.stderr
    batch = int(started.stdout.split("pid=")[1].split()[0])
    ident = run_dir / "status" / "rank-0.json"
    for _ in range(600):
        if ident.exists():
            break
        time.sleep(0.1)
    rank = json.loads(ident.read_text())["pid"]
    # Not the run's: a pager on its script, another run's step, a shell that only names it.
    other = tmp_path / "other-run"
    decoys = [subprocess.Popen(["tail", "-f", str(run_dir / "job.sh")], stdout=subprocess.DEVNULL),
              subprocess.Popen(["sleep", "300"], env=dict(os.environ, HPCTRAIN_STEP_OF=str(other))),
              subprocess.Popen(["bash", "-c", f"sleep 300 # {run_dir}/job.sh"])]
    try:
        out = subprocess.run(["bash", str(run_dir / "job.sh"), "stop"], capture_output=True,
                             text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert out.returncode == 0 and "stopped" in out.stdout, out.stdout + out.stderr
        assert not _alive(batch) and not _alive(rank)
        left = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
        mine = [line for line in left.splitlines() if f"{run_dir}/" in line and "tail -f" not in line
                and "sleep 300" not in line]
        assert mine == [], mine
        assert all(d.poll() is None for d in decoys)
        assert (run_dir / "status" / "exit_code").read_text().strip() == "143"
        assert not (run_dir / "status" / "failure.json").exists()  # stopped, not failed
    finally:
        for d in decoys:
            d.kill()
            d.wait()

"""A signal to a local job is handled as on Slurm (issue 28, item 1), and cancel signals only the
run's own processes (issue 27, item 2): real detached jobs, real torchrun on CPU (gloo), real
signals, one real run per behaviour."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from hpctrain.backends.local import processes_of
from tests.conftest import ROOT, submitted
from tests.operate_helpers import job_file, status_json


def _wait_for(cond, timeout, what, every=0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def _done(cli, ref, timeout=180) -> dict:
    # Once a second: each `hpctrain status` is a Python start (~0.15 CPU-s), taken from the
    # runs the suite's sessions share the two cores with.
    return _wait_for(lambda: (st := status_json(cli, ref))["state"]["done"] and st, timeout,
                     f"{ref} to end", every=1.0)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _ranks(run_dir: Path, n: int) -> list[int]:
    _wait_for(lambda: len(list(run_dir.glob("status/rank-*.json"))) >= n, 120, f"{n} ranks")
    return [json.loads(p.read_text())["pid"] for p in run_dir.glob("status/rank-*.json")]


def test_term_to_the_job_shell_saves_and_ends_stopped_with_nothing_left(cli, tmp_path):
    # A real rsl-rl training under the train hooks: SIGTERM to the job's shell (what a shutdown
    # or a user's kill does) reaches the ranks, which save at the next iteration boundary.
    proc = cli("submit", ROOT / "examples/rl/rsl_rl_pendulum.yaml", "--site", "local",
               "--set", "resources.nodes=1", "--set", f"python={sys.executable}",
               "--set", "args=[--updates,400,--save-interval,1000,--sleep,0.2,--num-envs,8,--steps,16]",
               cwd=ROOT)
    _, run_dir = submitted(proc.stdout)
    pids = _ranks(run_dir, 2)
    _wait_for(lambda: any(json.loads(p.read_text()).get("step", 0) >= 3
                          for p in run_dir.glob("status/progress-*.json")), 180, "iteration 3")
    shell = int((run_dir / "status" / "pid").read_text())
    os.kill(shell, signal.SIGTERM)
    st = _done(cli, run_dir.name)
    assert st["state"]["state"] == "STOPPED" and st["state"]["exit_code"] == 143, st
    stopped = json.loads((run_dir / "status" / "stopped.json").read_text())
    assert stopped["signal"] == "TERM" and Path(stopped["saved"]).is_file()
    assert f"saved {Path(stopped['saved']).relative_to(run_dir)}" in st["state"]["reason"]
    assert f"continue with: hpctrain submit --resume {run_dir}" in st["state"]["reason"]
    assert f"at iteration {stopped['step']}," in st["state"]["reason"]
    assert "STOPPED (SIGTERM) at iteration" in cli("status", run_dir.name).stdout
    assert not processes_of(run_dir) and not any(_alive(p) for p in pids + [shell])


def test_term_to_torchrun_is_an_ending_not_a_failure(cli, tmp_path):
    # A plain program that saves nothing: it ends on SIGTERM as it always did; the run is
    # STOPPED (not FAILED), and torchrun's SignalException traceback is not in the job's log.
    jf = job_file(tmp_path, "loc-term-agent", procs=2, args=["--seconds", "120"])
    _, run_dir = submitted(cli("submit", jf).stdout)
    pids = _ranks(run_dir, 2)
    shell = int((run_dir / "status" / "pid").read_text())
    agent = _wait_for(lambda: [p for p in map(int, Path(f"/proc/{shell}/task/{shell}/children")
                                              .read_text().split())
                               if b"agent" in Path(f"/proc/{p}/cmdline").read_bytes()], 30, "torchrun")
    os.kill(agent[0], signal.SIGTERM)
    st = _done(cli, run_dir.name)
    assert st["state"]["state"] == "STOPPED" and st["state"]["exit_code"] == 143, st
    assert "(SIGTERM)" in st["state"]["reason"] and "nothing was saved" in st["state"]["reason"]
    log = (run_dir / "logs" / "job.out").read_text()
    assert "Traceback" not in log and "SignalException" not in log, log[-3000:]
    assert "torchrun was sent SIGTERM" in log
    assert not processes_of(run_dir) and not any(_alive(p) for p in pids)


def test_cancel_spares_a_tail_of_the_log_and_a_forged_pid(cli, tmp_path):
    jf = job_file(tmp_path, "loc-cancel-own", procs=1, args=["--seconds", "120"])
    _, run_dir = submitted(cli("submit", jf).stdout)
    pids = _ranks(run_dir, 1)
    tail = subprocess.Popen(["tail", "-f", str(run_dir / "logs" / "job.out")],
                            stdout=subprocess.DEVNULL)
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        # A forged status/pid names an unrelated process: adopt and cancel must not take it.
        other = _done_free_run(cli, tmp_path)
        (other / "status" / "pid").write_text(f"{bystander.pid}\n")
        from hpctrain.backends.local import LocalBackend, process_start_time
        from hpctrain.runs.records import Run
        run = Run(other)
        run.update(pid=bystander.pid, pid_start=process_start_time(bystander.pid))
        LocalBackend().cancel(run)
        assert LocalBackend().adopt(run) is None
        assert bystander.poll() is None  # not signalled
        cli("cancel", run_dir.name)
        st = status_json(cli, run_dir.name)
        assert st["state"]["state"] == "CANCELLED"
        assert tail.poll() is None  # a `tail -f` of the run's log is not the run's
        assert not any(_alive(p) for p in pids) and not processes_of(run_dir)
    finally:
        tail.kill()
        bystander.kill()


def _done_free_run(cli, tmp_path) -> Path:
    """A run that has ended (its record then forged by the test)."""
    jf = job_file(tmp_path, "loc-forged", procs=1, args=["--seconds", "0"])
    proc = cli("submit", jf, "--wait", timeout=180)
    return submitted(proc.stdout)[1]


AGENT_IN_BARRIER = """
import datetime, logging, os, signal, sys, threading, types
from torch.distributed import TCPStore
from torch.distributed.elastic.agent.server import api as agent_api
from torch.distributed.elastic.multiprocessing import api as mp_api
from hpctrain.rank.end.ending import run_agent

logging.basicConfig(stream=sys.stdout, level=logging.INFO)
store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                 timeout=datetime.timedelta(seconds=30))
# An agent whose ranks have ended, in torch's own exit barrier, waiting 4 s for a second node's
# agent that never comes.
agent = types.SimpleNamespace(_store=store, _exit_barrier_timeout=4,
                              _worker_group=types.SimpleNamespace(state="SUCCEEDED", group_world_size=2))

def main(args):
    signal.signal(signal.SIGTERM, mp_api._terminate_process_handler)  # as torch installs it
    for delay in map(float, args):
        threading.Timer(delay, os.kill, (os.getpid(), signal.SIGTERM)).start()
    agent_api.SimpleElasticAgent._exit_barrier(agent)

sys.exit(run_agent(main, sys.argv[1:]))
"""


def test_a_signal_in_torchruns_exit_barrier_is_noted_and_the_barrier_ends_it(tmp_path):
    """torchrun's agent (run_agent) in torch's real exit barrier: its ranks are over, so a signal
    is noted and the barrier runs to its own end (raised there, in the middle of torch's log line
    about a peer gone, the signal printed as a logging error: seen in CI)."""
    (tmp_path / "agent.py").write_text(AGENT_IN_BARRIER)
    proc = subprocess.run([sys.executable, str(tmp_path / "agent.py"), "0.5", "1.0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "hpctrain: torchrun: SIGTERM: its ranks have ended; it ends once the other nodes' " \
           "torchruns have (its exit barrier)" in proc.stderr, out
    assert "Error waiting on exit barrier" in out and "wait timeout after 4000ms" in out, out
    assert "SignalException" not in out and "Got termination signal" not in out, out

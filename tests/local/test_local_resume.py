"""A local run stopped by a signal continues where it saved (issue 28, item 1): TERM to the job's
shell mid-training of a real rsl-rl job, then `hpctrain submit --resume RUN` in the same run
directory, from that checkpoint to the end. And a local sweep's own shell answers for signals as
each task's does. Real detached jobs, real torchrun on CPU (gloo), real signals."""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from hpctrain.backends.local import processes_of
from tests.conftest import ROOT, submitted
from tests.local.test_local_signals import _alive, _done, _ranks, _wait_for
from tests.operate_helpers import status_json

UPDATES = 12


def test_a_stopped_run_resumes_from_its_checkpoint_to_the_end(cli, tmp_path):
    proc = cli("submit", ROOT / "examples/rl/rsl_rl_pendulum.yaml", "--site", "local",
               "--set", "resources.nodes=1", "--set", f"python={sys.executable}",
               "--set", f"args=[--updates,{UPDATES},--save-interval,1000,--sleep,0.3,"
                        "--num-envs,8,--steps,16]",
               cwd=ROOT)
    _, run_dir = submitted(proc.stdout)
    _ranks(run_dir, 2)
    _wait_for(lambda: any(json.loads(p.read_text()).get("step", 0) >= 3
                          for p in run_dir.glob("status/progress-*.json")), 180, "iteration 3")
    os.kill(int((run_dir / "status" / "pid").read_text()), signal.SIGTERM)
    st = _done(cli, run_dir.name)
    assert st["state"]["state"] == "STOPPED", st
    stopped = json.loads((run_dir / "status" / "stopped.json").read_text())
    saved, step = Path(stopped["saved"]), stopped["step"]
    assert saved.is_file() and 3 <= step < UPDATES, stopped
    first = [json.loads(line) for line in (run_dir / "results" / "attempts.jsonl").read_text().splitlines()]
    assert len(first) == 2 and all(a["started_from"] == 0 and a["reached"] == step for a in first), first
    stopped_weights = {a["params_sha256"] for a in first}
    assert len(stopped_weights) == 1  # the ranks agreed on one iteration and one set of weights

    # The hint the STOPPED state gives, as a user would type it.
    hint = st["state"]["reason"].split("continue with: ", 1)[1].split()
    assert hint[:3] == ["hpctrain", "submit", "--resume"], hint
    again = cli(*hint[1:], "--wait", timeout=300)
    assert "resumed " in again.stdout, again.stdout
    st = status_json(cli, run_dir.name)
    assert st["state"]["state"] == "COMPLETED" and st["state"]["exit_code"] == 0, st
    assert not (run_dir / "status" / "stopped.json").exists()  # the new attempt ended otherwise

    attempts = [json.loads(line) for line in (run_dir / "results" / "attempts.jsonl").read_text().splitlines()]
    resumed = attempts[2:]
    assert len(resumed) == 2, attempts
    for a in resumed:
        # rsl-rl's own load of the file the stop saved: its iteration, then on to the end.
        assert a["resume_from"] == str(saved) and a["started_from"] == step, a
        assert a["reached"] == UPDATES - 1, a  # the index of the last iteration: all of them run
    results = [json.loads(p.read_text()) for p in sorted((run_dir / "results").glob("rank-*.json"))]
    for r in results:
        assert r["resumed_from"] == step
        assert r["initial_params_sha256"] in stopped_weights  # it started from the saved weights
        assert r["params_sha256"] not in stopped_weights  # and trained on from them
    assert (run_dir / "checkpoints" / f"model_{results[0]['iteration']}.pt").is_file()
    assert not processes_of(run_dir)


def test_term_to_a_sweeps_shell_stops_its_tasks_and_starts_no_more(cli, tmp_path):
    # Three rsl-rl tasks, two at a time: SIGTERM to the sweep's own shell (not a task's) reaches
    # the running tasks, whose ranks save; the third never starts, and says so.
    proc = cli("submit", ROOT / "examples/rl/rsl_rl_pendulum.yaml", "--site", "local",
               "--set", "resources.nodes=1", "--set", "resources.procs_per_node=1",
               "--set", f"python={sys.executable}", "--set", "sweep.seeds=[1,2,3]",
               "--set", "sweep.parallel=2",
               "--set", "args=[--updates,400,--save-interval,1000,--sleep,0.2,--num-envs,8,--steps,16]",
               cwd=ROOT)
    _, run_dir = submitted(proc.stdout)
    tasks = [run_dir / "tasks" / str(i) for i in range(3)]
    for task in tasks[:2]:
        _wait_for(lambda: any(json.loads(p.read_text()).get("step", 0) >= 2
                              for p in task.glob("status/progress-*.json")), 180, f"{task} at iteration 2")
    pids = [json.loads(p.read_text())["pid"] for t in tasks[:2] for p in t.glob("status/rank-*.json")]
    shell = int((run_dir / "status" / "pid").read_text())
    os.kill(shell, signal.SIGTERM)
    st = _done(cli, run_dir.name)
    assert st["state"]["state"] == "STOPPED", st
    states = st["state"]["tasks"]
    assert [t["state"] for t in states] == ["STOPPED"] * 3, states
    for task in tasks[:2]:
        stopped = json.loads((task / "status" / "stopped.json").read_text())
        assert stopped["signal"] == "TERM" and Path(stopped["saved"]).is_file(), stopped
    assert not (tasks[2] / "logs" / "job.out").exists()  # never started
    assert "before it started: the sweep was stopped" in states[2]["reason"]
    assert "the sweep was stopped (SIGTERM)" in (run_dir / "logs" / "job.out").read_text()
    assert not processes_of(run_dir) and not any(_alive(p) for p in pids + [shell])

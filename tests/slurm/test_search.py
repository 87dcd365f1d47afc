"""A study on the real local Slurm cluster (issue 41): one job array of 2 workers, each trial a
2-node torchrun launch (a gloo all_reduce across the nodes) inside the worker's allocation; one
worker is requeued mid-trial with `scontrol requeue` and its next run resumes *that* trial
from its checkpoint, not a new one. Then the study goes on (`submit --resume --set
search.n_trials=4`), `hpctrain cancel` mid-trial ends every worker and every rank of the trial,
and `submit --resume` finishes that trial from its checkpoint."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import yaml

from hpctrain.search import journal
from tests.conftest import ROOT, job_states, submitted, wait_for_job

STEPS = 24
JOB = {
    "name": "study2n", "script": str(ROOT / "tests/programs/known_reward.py"),
    "python": sys.executable,
    "resources": {"nodes": 2, "procs_per_node": 1, "time": "00:10:00"},
    "args": ["--lr=0.001", f"--steps={STEPS}", "--step-time=0.3"],
    "search": {"params": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}},
               "n_trials": 3, "parallel": 2, "sampler": "random", "seed": 5, "pruner": "none"},
}


def _study(run_dir):
    return optuna.load_study(study_name=run_dir.name, storage=journal.storage(run_dir))


def test_two_workers_of_two_node_trials_and_a_requeued_worker_resumes_its_trial(cli, cluster,
                                                                               tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(JOB))
    job_id, run_dir = submitted(cli("submit", path, "--site", cluster).stdout)
    S = optuna.trial.TrialState

    def worker1_mid_trial():
        for t in _study(run_dir).get_trials():
            d = run_dir / t.user_attrs.get("trial_dir", "-") / "checkpoints"
            if t.user_attrs.get("worker") == 1 and t.state == S.RUNNING \
                    and len(list(d.glob("step-*.json"))) >= 4:
                return t
        return None
    deadline = time.monotonic() + 240
    victim = None
    while victim is None and time.monotonic() < deadline:
        victim = worker1_mid_trial()
        time.sleep(0.5)
    assert victim is not None, "worker 1 never got 4 steps into a trial"
    subprocess.run(["scontrol", "requeue", f"{job_id}_1"], check=True)

    wait_for_job(job_id, timeout=400)
    study = _study(run_dir)
    trials = study.get_trials()
    assert len(trials) == 3 and all(t.state == S.COMPLETE for t in trials), \
        [(t.number, t.state, t.user_attrs) for t in trials]
    again = [t for t in trials if t.number == victim.number][0]
    # The same trial, a second attempt on the requeued worker, resumed from its checkpoint.
    assert again.user_attrs["attempts"] == 2 and again.user_attrs["worker"] == 1
    assert again.user_attrs["job_id"] == f"{job_id}_1"
    d = run_dir / again.user_attrs["trial_dir"]
    resumed = int((d / "status" / "resumed-0.txt").read_text())
    assert 4 < resumed <= STEPS, resumed
    for t in trials:
        td = run_dir / t.user_attrs["trial_dir"]
        # A 2-node trial: both ranks' logs, two nodes in the worker's allocation.
        assert sorted(p.name for p in (td / "logs").glob("rank-*.log")) == ["rank-0.log", "rank-1.log"]
        hosts = subprocess.run(["scontrol", "show", "hostnames", t.user_attrs["nodes"]],
                               capture_output=True, text=True).stdout.split()
        assert len(hosts) == 2, t.user_attrs
        assert abs(t.value - _expected(t.params["lr"])) < 1e-6  # rank 0 reported its last step
    assert {t.user_attrs["worker"] for t in trials} == {0, 1}

    # One trial more; cancelled while it trains: no worker, no rank of it is left on any node
    # (the nodes' processes are this machine's), and it stays RUNNING for --resume.
    out = cli("submit", "--resume", run_dir.name, "--set", "search.n_trials=4").stdout
    job2 = out.split(" job ")[1].split()[0]
    ckpts = run_dir / "trials" / "0003" / "checkpoints"
    deadline = time.monotonic() + 120
    while len(list(ckpts.glob("step-*.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert len(list(ckpts.glob("step-*.json"))) >= 2, "trial 3 never trained 2 steps"
    assert _processes(run_dir), "nothing of the study runs before the cancel"
    said = cli("cancel", run_dir.name).stdout
    ended = wait_for_job(job2, timeout=60)
    assert ended.get("JobState") == "CANCELLED", (said, job_states(job2), _study(run_dir).get_trials())
    deadline = time.monotonic() + 30
    while _processes(run_dir) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not _processes(run_dir), _processes(run_dir)
    fourth = [t for t in _study(run_dir).get_trials() if t.number == 3][0]
    assert fourth.state == S.RUNNING and fourth.user_attrs["attempts"] == 1

    out = cli("submit", "--resume", run_dir.name).stdout
    wait_for_job(out.split(" job ")[1].split()[0], timeout=120)
    done = [t for t in _study(run_dir).get_trials() if t.user_attrs.get("fail_cause") is None]
    assert [t.state for t in done] == [S.COMPLETE] * 4, [(t.number, t.state) for t in done]
    assert done[3].user_attrs["attempts"] == 2  # the cancelled trial, from its checkpoint
    assert 2 <= int((run_dir / "trials/0003/status/resumed-0.txt").read_text()) <= STEPS
    assert abs(done[3].value - _expected(done[3].params["lr"])) < 1e-6


def _processes(run_dir: Path) -> list[str]:
    """Processes (workers, trial scripts, torchrun, ranks) whose command line names the study."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                argv = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(run_dir).encode() in argv:
                found.append(argv.replace(b"\0", b" ").decode(errors="replace")[:200])
    return found


def _expected(lr: float) -> float:
    import math
    return -(math.log10(lr) + 3) ** 2 * (1 + 1 / STEPS)

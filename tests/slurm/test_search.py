"""A study on the real local Slurm cluster (issue 41): one job array of 2 workers, each trial a
2-node torchrun launch (a gloo all_reduce across the nodes) inside the worker's allocation; one
worker is requeued mid-trial with `scontrol requeue` and its next run resumes *that* trial
from its checkpoint, not a new one."""
from __future__ import annotations

import subprocess
import sys
import time

import optuna
import yaml

from hpctrain.search import journal
from tests.conftest import ROOT, submitted, wait_for_job

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


def _expected(lr: float) -> float:
    import math
    return -(math.log10(lr) + 3) ** 2 * (1 + 1 / STEPS)

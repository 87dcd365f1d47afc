"""A study outlives its workers' time limit (issue 51 item 4), on the real local Slurm cluster:
one worker, a 1-minute limit whose warning comes 40 s ahead (20 s of each allocation usable),
two trials of ~10 s. An allocation fits one trial, not two: the worker requeues its allocation
for the study's time (or the warning comes mid-trial, on a loaded machine, and the requeued
worker resumes that trial), and the study completes both trials by itself, with
`preemption.max_requeues: 0` (those requeues are not counted against it) and `submit --wait`
following it to the end."""
from __future__ import annotations

import json
import re
import sys

import optuna

from hpctrain.search import journal
from tests.conftest import ROOT, submitted, wait_for_job

JOB = {
    "name": "studytime", "script": str(ROOT / "tests/programs/known_reward.py"),
    "python": sys.executable,
    "resources": {"nodes": 1, "procs_per_node": 1, "time": "00:01:00"},
    "args": ["--lr=0.001", "--steps=16", "--step-time=0.4"],
    "preemption": {"lead_time": 40, "grace": 15, "max_requeues": 0},
    "search": {"params": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}},
               "n_trials": 2, "parallel": 1, "sampler": "random", "seed": 3, "pruner": "none"},
}


def test_a_study_longer_than_its_workers_time_limit_finishes_by_itself(cli, cluster, tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text(json.dumps(JOB))
    proc = cli("submit", path, "--site", cluster, "--wait", timeout=400)
    job_id, run_dir = submitted(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    info = wait_for_job(job_id, timeout=30)  # --wait followed it to the end, requeues and all
    log = "".join(p.read_text() for p in sorted((run_dir / "logs").glob("worker-*.out")))
    study = optuna.load_study(study_name=run_dir.name, storage=journal.storage(run_dir))
    trials = study.get_trials()
    S = optuna.trial.TrialState
    assert [t.state for t in trials] == [S.COMPLETE] * 2, ([(t.number, t.state, t.user_attrs)
                                                           for t in trials], log[-4000:])
    assert info["JobState"] == "COMPLETED" and int(info["Restarts"]) >= 1, (info, log[-4000:])
    requeues = re.findall(r"requeueing job \S+ for the study's time \(for the time limit: (\d+), "
                          r"not counted against preemption\.max_requeues\)", log)
    assert requeues and [int(n) for n in requeues] == list(range(1, len(requeues) + 1)), log[-4000:]
    assert int(info["Restarts"]) == len(requeues), (info, requeues)
    # Each trial ran whole in one allocation, or resumed in the next from its checkpoint.
    for t in trials:
        assert t.user_attrs["job_id"] == f"{job_id}_0", t.user_attrs
    status = cli("status", str(run_dir)).stdout
    assert re.search(r"^trials    2 of 2: 2 complete; 0 left$", status, re.M), status

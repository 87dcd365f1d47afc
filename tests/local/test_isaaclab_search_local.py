"""A study and a population on the real Isaac Lab 3.0 (issue 49, item 5): the manual's worked
example, small (docs/search.md: rsl_rl on Isaac-Cartpole, agent.algorithm.* as Hydra overrides),
and two rsl_rl members that copy each other's checkpoints on the real task. Local site, 1 rank
each (what a trial or member adds over a single training is the search around it, proven on
several ranks and nodes by tests/local/test_search_local.py and tests/slurm/test_pbt.py)."""
from __future__ import annotations

import json
import math
import re

import optuna

from hpctrain.search import journal
from tests.conftest import submitted
from tests.isaaclab3 import cartpole_job, write_job

ONE_RANK = {"nodes": 1, "procs_per_node": 1, "time": "00:10:00"}


def test_isaaclab3_study_over_the_learning_rate(cli, tmp_path):
    job = cartpole_job("isaac3-study", 3, num_envs=16, resources=ONE_RANK)
    job["args"] += ["agent.algorithm.learning_rate=1.0e-3", "agent.algorithm.schedule=fixed"]
    job["search"] = {"params": {"agent.algorithm.learning_rate": {"low": 1e-4, "high": 1e-2, "log": True}},
                     "metric": "reward", "direction": "maximize", "n_trials": 3, "parallel": 3,
                     "pruner": "none", "sampler": "random", "seed": 5}
    _, run_dir = submitted(cli("submit", write_job(tmp_path, job), "--wait", timeout=600).stdout)
    study = optuna.load_study(study_name=run_dir.name, storage=journal.storage(run_dir))
    trials = study.get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 3, \
        [(t.number, t.state, t.user_attrs.get("fail_cause")) for t in trials]
    for t in trials:
        d = run_dir / t.user_attrs["trial_dir"]
        lr = t.params["agent.algorithm.learning_rate"]
        [probe] = [json.loads(p.read_text()) for p in (d / "results").glob("rank-*.json")]
        # Isaac Lab's PPO trained with the trial's own value, given as its Hydra override.
        assert math.isclose(probe["learning_rate"], lr, rel_tol=1e-9), (probe, lr)
        assert probe["iteration"] == 2 and math.isfinite(t.value) and t.intermediate_values
        [progress] = [json.loads(p.read_text()) for p in (d / "status").glob("progress-*.json")]
        assert t.value == progress["metrics"]["reward"]
    assert len({t.params["agent.algorithm.learning_rate"] for t in trials}) == 3
    assert study.best_value == max(t.value for t in trials)
    shown = cli("status", run_dir.name).stdout
    assert re.search(rf"best\s+#{study.best_trial.number}\b", shown), shown


def test_isaaclab3_population_copies_a_checkpoint_and_resumes_from_it(cli, tmp_path):
    job = cartpole_job("isaac3-pbt", 8, num_envs=16, resources=ONE_RANK)
    job["args"] += ["agent.algorithm.entropy_coef=0.005", "agent.save_interval=2"]
    job["search"] = {"method": "pbt", "parallel": 2, "seed": 7,
                     "params": {"agent.algorithm.entropy_coef": {"low": 1e-4, "high": 0.1, "log": True}},
                     "pbt": {"interval": 4, "steps": 8, "fraction": 0.5, "factors": [0.5, 2]}}
    _, run_dir = submitted(cli("submit", write_job(tmp_path, job), "--wait", timeout=600).stdout)
    lineage = {i: [json.loads(line) for line in
                   (run_dir / "population" / f"member-{i}.jsonl").read_text().splitlines()]
               for i in range(2)}
    assert all(recs[-1]["event"] == "end" for recs in lineage.values()), lineage
    copies = [(i, r) for i, recs in lineage.items() for r in recs if r["event"] == "exploit"]
    assert copies, lineage
    for i, r in copies:
        member = run_dir / "trials" / f"{i:04d}"
        copied = member / r["checkpoint"]
        iteration = int(re.fullmatch(r"logs/rsl_rl/cartpole/hpctrain/model_(\d+)\.pt",
                                     r["checkpoint"]).group(1))
        log = (member / "logs" / "rank-0.log").read_text(errors="replace")
        # 3.0's --checkpoint was handed the copied file itself, and rsl_rl loaded it.
        assert f"Loading model checkpoint from: {copied}" in log, log[-3000:]
        probe = json.loads((member / "results" / "rank-0.json").read_text())
        assert probe["started_from"] == iteration and probe["iteration"] == 7, probe
        assert math.isclose(probe["entropy_coef"], r["params"]["agent.algorithm.entropy_coef"],
                            rel_tol=1e-9), (probe, r)
    st = json.loads(cli("status", run_dir.name, "--json").stdout)["population"]
    assert st["best"] is not None and st["copies"] == len(copies)

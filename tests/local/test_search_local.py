"""A study on the local site (issue 41): two worker processes run six trials of a program whose
reward is a known function of its parameters (tests/programs/known_reward.py), the median
pruner stops the bad ones early, the best is the known optimum's region; a worker killed -9
leaves a readable study, which `submit --resume` continues (the dead worker's trial is FAIL
"worker gone" and a new one takes its place). Real processes, real torchrun (gloo on CPU)."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml

from hpctrain.search import journal
from tests.conftest import ROOT, submitted

STEPS = 12
# RandomSampler, seed 12: worker 0 draws widths 4, 40, 40, 40; worker 1 draws 4, 40, 4, 4 — each
# worker's draws are its own (search/journal.load), whatever the other did meanwhile.
JOB = {
    "name": "kr", "script": str(ROOT / "tests/programs/known_reward.py"),
    "python": sys.executable,
    "args": ["--lr=0.001", "--width=4", f"--steps={STEPS}", "--step-time=0.3"],
    "search": {"params": {"lr": {"low": 1e-4, "high": 1e-2, "log": True},
                          "width": {"choices": [4, 40]}},
               "n_trials": 6, "parallel": 2, "sampler": "random", "seed": 12,
               "pruner": "median"},
}


def _study(run_dir: Path):
    rid = run_dir.name
    return optuna.load_study(study_name=rid, storage=journal.storage(run_dir))


def _wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _worker_pid(run_dir: Path, index: int) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"hpctrain.search.worker" in argv and str(run_dir).encode() in argv \
                and argv[-2:] == [str(index).encode(), b""]:
            return int(entry.name)
    return None


def test_a_local_study_prunes_finds_the_optimum_and_survives_a_killed_worker(cli, tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(JOB))
    _, run_dir = submitted(cli("submit", path, "--site", "local").stdout)

    # Worker 1, in its second trial (a bad one, width 40), is killed -9.
    def running_second():
        trials = _study(run_dir).get_trials()
        mine = [t for t in trials if t.user_attrs.get("worker") == 1]
        return len(mine) >= 2 and mine[-1].state == optuna.trial.TrialState.RUNNING \
            and "trial_dir" in mine[-1].user_attrs and mine[-1]
    victim = _wait(running_second, 120, "worker 1's second trial")
    os.kill(_worker_pid(run_dir, 1), signal.SIGKILL)

    _wait(lambda: (run_dir / "status" / "exit_code").exists(), 180, "the study's end")
    study = _study(run_dir)  # readable after the kill
    trials = study.get_trials()
    S = optuna.trial.TrialState
    left = [t for t in trials if t.state == S.RUNNING]
    assert [t.number for t in left] == [victim.number], trials
    assert len(trials) == 6 and study.user_attrs["n_trials"] == 6

    # The pruner stopped bad trials early: each below the completed trials' values at its step.
    pruned = [t for t in trials if t.state == S.PRUNED]
    assert pruned, [(t.number, t.state, t.params) for t in trials]
    for t in pruned:
        assert t.user_attrs["pruned_step"] < STEPS and t.params["width"] == 40, t
        assert max(t.intermediate_values) == t.user_attrs["pruned_step"], t
    # The best trial is the optimum's region: width 4, lr within a decade of 1e-3.
    best = study.best_trial
    assert best.params["width"] == 4 and best.value > -1.2, best
    for t in trials:
        assert t.user_attrs["trial_dir"] == f"trials/{t.number:04d}"
        assert {"worker", "job_id", "nodes", "started", "attempts"} <= set(t.user_attrs)

    # submit --resume: the new worker 1 runs the dead worker's trial again, from its checkpoint
    # (once the ranks the killed worker left have ended: a trial never runs twice at once).
    from hpctrain.backends.local import processes_of
    _wait(lambda: not processes_of(run_dir / victim.user_attrs["trial_dir"]), 60, "the orphan trial")
    cli("submit", "--resume", run_dir.name, "--wait", timeout=180)
    trials = _study(run_dir).get_trials()
    again = [t for t in trials if t.number == victim.number][0]
    # (a bad trial, width 40: pruned again from the steps it reported before, now that others
    # completed; tests/slurm/test_search.py checks the resume from a checkpoint itself)
    assert again.state in (S.COMPLETE, S.PRUNED) and again.user_attrs["attempts"] == 2, (
        again.user_attrs.get("fail_cause"), again.user_attrs["attempts"],
        (run_dir / "logs" / "worker-1.log").read_text()[-3000:])
    assert again.user_attrs["worker"] == 1 and not again.user_attrs["adopt"]
    assert len(trials) == 6 and not [t for t in trials if t.state == S.RUNNING], trials

    # Followed (`status`/`report STUDY`, search/follow.py): the same trials and best; the gone
    # worker's trial does not count toward n_trials; every pruned trial's step and cost.
    from hpctrain.runs.records import Run
    from hpctrain.search import follow
    st = follow.status(Run(run_dir))
    assert [r.number for r in st.trials] == [t.number for t in trials] and st.left == 0
    assert st.best.number == _study(run_dir).best_trial.number
    assert {r.number: r.pruned_step for r in st.trials if r.state == "PRUNED"} == \
        {t.number: t.user_attrs["pruned_step"] for t in trials if t.state == S.PRUNED}
    cost = follow.cost(Run(run_dir))
    assert cost.pruned == st.counts["PRUNED"] and all(c.node_hours for c in cost.trials if c.state != "FAIL")

    # `pull STUDY --best`: the best trial's folder alone, with a manifest.
    got = tmp_path / "best"
    out = cli("pull", run_dir.name, "--best", "--to", got).stdout
    assert f"best: trial {st.best.number}," in out, out
    folder = f"trials/{st.best.number:04d}/"
    pulled = [f["path"] for f in json.loads((got / "hpctrain-pull.json").read_text())["files"]]
    assert pulled and all(p.startswith(folder) for p in pulled), pulled
    assert any(p.startswith(folder + "logs/") for p in pulled), pulled


def test_failures_in_a_row_stop_the_study_with_their_cause(cli, tmp_path):
    """A setting that breaks every trial (here: every lr diverges) stops the study after
    search.max_failures failed trials in a row, with the cause, instead of burning n_trials.
    And a study from Python through the submitit path (submit_function with a search: job):
    each trial calls a function defined here (pickled by value, as a notebook cell's is) with
    its values, and the study's handle returns the best parameters when it ends."""
    job = dict(JOB, args=["--lr=0.001", "--steps=3", "--step-time=0", "--fail-above=0"],
               search=dict(JOB["search"], n_trials=8, parallel=1, max_failures=2,
                           params={"lr": {"low": 1e-4, "high": 1e-2, "log": True}}))
    path = tmp_path / "failing.yaml"
    path.write_text(yaml.safe_dump(job))
    proc = cli("submit", path, "--site", "local", "--wait", timeout=180, check=False)
    _, run_dir = submitted(proc.stdout)
    study = _study(run_dir)
    trials = study.get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.FAIL] * 2, trials
    stopped = study.user_attrs["stopped"]
    assert stopped.startswith("2 trials failed in a row: "), stopped
    assert "trials/0001/logs/" in stopped and trials[1].user_attrs["fail_cause"] in stopped
    assert (run_dir / "status" / "exit_code").read_text().strip() == "1"

    def train(lr, width, steps, offset):  # known_reward's reward, reported as a program does
        import math
        import hpctrain_progress
        for step in range(1, steps + 1):
            hpctrain_progress.report(step, reward=-(math.log10(lr) + 3) ** 2 - (width - 4) ** 2 / 10
                                     + offset)

    import hpctrain
    fjob = {"name": "fs", "python": sys.executable, "args": ["lr=0.001", "width=4", "steps=2"],
            "search": {"params": {"lr": {"low": 1e-4, "high": 1e-2, "log": True},
                                  "width": {"choices": [4, 40]}},
                       "n_trials": 2, "parallel": 2, "sampler": "random", "seed": 12,
                       "pruner": "none"}}
    fpath = tmp_path / "function-study.yaml"
    fpath.write_text(yaml.safe_dump(fjob))
    s = hpctrain.submit_function(train, hpctrain.load_job(str(fpath), site="local"), offset=1.0)
    best = s.result(timeout=120)
    fstudy = _study(s.run_dir)
    done = fstudy.get_trials()
    assert [t.state for t in done] == [optuna.trial.TrialState.COMPLETE] * 2, \
        [(t.number, t.state, t.user_attrs.get("fail_cause")) for t in done]
    top = max(done, key=lambda t: t.value)
    assert (best.number, best.params, best.value) == (top.number, top.params, top.value)
    import math
    assert best.value == pytest.approx(1 - (math.log10(best.params["lr"]) + 3) ** 2
                                       - (best.params["width"] - 4) ** 2 / 10, abs=1e-9)

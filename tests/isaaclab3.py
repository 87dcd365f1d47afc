"""The real Isaac Lab 3.0 in the suite: its venv (scripts/install-isaaclab.sh), the job every
Isaac Lab test starts from, and the checks of what it trained.

The venv, its asset root and Warp's kernel cache are built once per suite run, beside the unit
tier (scripts/test-all.sh); a test that finds no venv fails and says how to make one (a skipped
test fails the run anyway).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.conftest import ROOT

VENV = ROOT / ".venv-isaaclab"
ASSETS = VENV / "assets"
PROGRAMS = ROOT / "tests" / "programs"


def require_venv() -> None:
    if not (VENV / ".hpctrain-isaaclab-3.0.0").exists():
        pytest.fail("no Isaac Lab 3.0 venv: run scripts/install-isaaclab.sh (test-all.sh does)")


def cartpole_job(name: str, iterations: int, num_envs: int = 32, **extra) -> dict:
    """rsl_rl on Isaac-Cartpole (Newton, CPU) with the probe that records every rank's weights
    (tests/programs/isaaclab_probe.py); the caches and assets of the suite's venv."""
    require_venv()
    job = {
        "name": name, "library": "rsl_rl", "task": "Isaac-Cartpole",
        "isaaclab": str(VENV), "isaaclab_assets": str(ASSETS), "seed": 42,
        "args": ["--num_envs", str(num_envs), "--max_iterations", str(iterations),
                 "--external_callback", "isaaclab_probe.install"],
        "env": {"WARP_CACHE_PATH": str(VENV / "cache" / "warp"),
                "XDG_CACHE_HOME": str(VENV / "cache" / "xdg"), "PYTHONPATH": str(PROGRAMS)},
        "resources": {"nodes": 1, "procs_per_node": 2, "time": "00:10:00"},
    }
    job.update(extra)
    return job


def write_job(tmp_path: Path, job: dict) -> Path:
    path = tmp_path / f"{job['name']}.json"
    path.write_text(json.dumps(job))  # JSON is YAML
    return path


def results(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "results").glob("rank-*.json"))]


def check_trained(run_dir: Path, world: int, hosts: int, last: int) -> list[dict]:
    """Every rank trained to iteration `last`, from one synchronised start, to one set of weights."""
    rs = results(run_dir)
    assert [r["rank"] for r in rs] == list(range(world)), rs
    assert {r["world_size"] for r in rs} == {world} and len({r["hostname"] for r in rs}) == hosts, rs
    assert len({r["initial_params_sha256"] for r in rs}) == 1, f"ranks started apart: {rs}"
    assert len({r["params_sha256"] for r in rs}) == 1, f"weights differ across ranks: {rs}"
    for r in rs:
        assert r["params_sha256"] != r["initial_params_sha256"], r
        assert math.isfinite(r["first_loss"]) and math.isfinite(r["last_loss"]), r
        assert r["iteration"] == last, r
    return rs


def checkpoints(run_dir: Path) -> dict[int, Path]:
    """rank 0's model_<iteration>.pt files, by iteration."""
    found = run_dir.glob("logs/rsl_rl/cartpole/hpctrain/model_*.pt")
    return {int(p.stem.split("_")[1]): p for p in found}


def evaluated(cli, run_dir: Path, *args: str) -> tuple[Path, list[dict]]:
    """`hpctrain eval RUN ARGS --wait` (8 environments x 320 steps: past Cartpole's 300-step
    episodes): the evaluation's run directory and the run's records, each checked played."""
    from tests.conftest import submitted
    proc = cli("eval", run_dir.name, *args, "--episodes", "8", "--steps", "320", "--wait",
               timeout=600)
    _, eval_dir = submitted(proc.stdout)
    st = json.loads(cli("status", run_dir.name, "--json").stdout)
    evals = st["evaluations"]
    logs = "".join(p.read_text(errors="replace")[-3000:] for p in sorted(
        eval_dir.glob("**/logs/rank-0.log")))
    assert evals and not st["evaluation_problems"], (proc.stdout, st["evaluation_problems"], logs)
    for e in evals:
        assert e["status"] == "ok" and e["method"] == "isaaclab benchmark play", (e, logs)
        assert math.isfinite(e["mean_return"]) and 0 < e["episode_length"] <= 300, e
        assert e["seed"] == 42 and e["eval_run"] == eval_dir.name, e
    return eval_dir, evals

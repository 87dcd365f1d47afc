"""Real RL trainings on the real cluster, with stock-style training scripts that install no signal
handler, are preempted by a higher-priority job mid-run; the bootstrap's train hooks save with
the library's own save at the next iteration, the batch shell requeues the job itself (a step
that exits inside Slurm's grace time is not requeued by Slurm), and the next run resumes from
exactly that checkpoint (issue 12, items 1 and 2).

The preemption is Slurm's own (tests/cluster/README.md): a `-p high --exclusive` job on the
victim's nodes; SIGTERM reaches the step's tasks (torchrun's agents and the ranks), not the
batch shell, and the job stays RUNNING for the partition's GraceTime. The signal is sent once
the training has written a periodic checkpoint past its start, so the resume point must lie
beyond it.

The same run is each library's two-node training test (one real run proves both): the resumed
run ends with every rank's weights equal, moved from where it started, the library's own loss
moved, rank 0's checkpoint where the adapter looks for it, and the progress the hooks report
shown by `status` (tests/e2e/learning.py). Each runs on 2 nodes x 1 rank: world 2 across the
node boundary is what their distributed modes must get right, and each further rank is a
library start-up (2-4 core-seconds of imports, JAX's 15 with its compile) that proves nothing
more here. rsl-rl's own runs in the real Isaac Lab 3.0 (tests/e2e/test_isaaclab_cluster.py: the
same preemption, save and resume, through `isaaclab train`). Ranks that share a node train in tests/ssh (rsl-rl, 2 hosts x 2 ranks: one torchrun
per host, as on Slurm) and in tests/slurm/test_containers.py.
"""
from __future__ import annotations

import re
import sys
import time

import pytest

from tests.conftest import ROOT, read_results, submitted, wait_for_job
from tests.e2e.learning import check_progress, check_trained
from tests.slurm.survive import SIDE, attempts, preempt_by_high_job, slurm_log, wait_until


STEPS = 8  # skrl: timesteps per update (its checkpoints are named by timestep)
DING_PYTHON = ROOT / ".venv-ding" / "bin" / "python"


def _number(pattern: str, per: int = 1):
    return lambda name: (int(m.group(1)) // per if (m := re.fullmatch(pattern, name)) else None)


# job file, checkpoint glob (in the run), iteration of a checkpoint's name, args, updates in all.
# The updates: enough that the preemption (sent once a periodic checkpoint exists, at the 4th)
# lands well before the end (~8 s of sleeps left), few enough that the resumed run is short.
# rl-games and rsl-rl: rollouts long enough that Pendulum's 200-step episodes end within the
# resumed run (3+ updates x 70 steps): only then has the library a mean reward to report.
LIBRARIES = {
    "rl_games": ("examples/rl/rl_games_pendulum.yaml", "checkpoints/nn/*.pth",
                 _number(r"last_pendulum_ep_(\d+)_rew_.*\.pth"),
                 ["--save-interval", "4", "--sleep", "0.5", "--num-envs", "8", "--steps", "70"], 20),
    "skrl": ("examples/rl/skrl_torch_pendulum.yaml", "checkpoints/agent_*.pt",
             _number(r"agent_(\d+)\.pt", STEPS),
             ["--save-interval", "4", "--sleep", "0.5", "--num-envs", "8", "--steps", str(STEPS)], 20),
    "skrl_jax": ("examples/rl/skrl_jax_pendulum.yaml", "checkpoints/agent_*.pickle",
                 _number(r"agent_(\d+)\.pickle", STEPS),
                 ["--save-interval", "2", "--sleep", "0.3", "--num-envs", "4", "--steps", str(STEPS)], 16),
    "di_engine": ("examples/di_engine/cartpole_dqn_ddp.yaml", "*/ckpt/iteration_*.pth.tar",
                  _number(r"iteration_(\d+)\.pth\.tar"),
                  ["--save-interval", "20", "--sleep", "0.1", "--stop-value", "100000"], None),
}


def check_plot(cli, job_id: str, run_dir, results: list[dict], tmp_path) -> None:
    """`hpctrain plot` on the event files rsl-rl's own logger wrote (rank 0, its log_dir: the real
    Isaac Lab's, tests/e2e/test_isaaclab_cluster.py), in both attempts: its own tags, one point per
    learning iteration on one step axis, in a non-empty PNG."""
    import math

    from hpctrain.follow.curves import read_run
    png = tmp_path / "rsl_rl.png"
    out = cli("plot", job_id, "--out", png).stdout
    assert out.splitlines()[-1] == str(png), out
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    [scalars] = read_run(str(run_dir))
    assert "Loss/value" in scalars.tags and "Perf/total_fps" in scalars.tags, scalars.tags
    [last] = {r["iteration"] for r in results}
    curve = scalars.curve("Loss/value")
    assert curve.steps == list(range(last + 1)) and curve.attempts == 2, curve
    assert all(math.isfinite(v) for v in curve.values), curve
    # The library's main metric first (libraries/rsl_rl.py: main_scalars), with both attempts.
    assert out.startswith(f"Train/mean_reward {last + 1} points, steps 0-{last}, 2 attempt(s)"), out


@pytest.mark.parametrize("library", list(LIBRARIES))
def test_preempted_stock_training_saves_requeues_and_resumes(library, cli, cluster, tmp_path):
    from hpctrain.libraries import adapter
    job_file, pattern, iteration_of, args, updates = LIBRARIES[library]
    assert pattern in adapter(library).checkpoint_globs  # resume looks where the library saves
    python = DING_PYTHON if library == "di_engine" else sys.executable
    if library == "di_engine":
        assert DING_PYTHON.exists(), "bash scripts/install-ding-venv.sh"
        total = ["--max-env-step", "800"]
    else:
        total = ["--updates", str(updates)]
    shape = ["--set", "resources.nodes=2", "--set", "resources.procs_per_node=1"]
    t0 = time.monotonic()
    job_id, run_dir = submitted(cli("submit", job_file, "--site", cluster, *SIDE, *shape,
                                    "--set", f"python={python}",
                                    "--set", f"args=[{','.join(total + args)}]").stdout)

    def periodic():
        its = [iteration_of(p.name) for p in run_dir.glob(pattern)]
        its = [i for i in its if i is not None]
        return max(its) if its and max(its) > 0 else None
    seen = wait_until(periodic, 400, "a periodic checkpoint past the start", job_id)
    high = preempt_by_high_job(job_id, tmp_path)
    t_preempt = time.monotonic()
    # Every rank writes status/stop-R.json when the preemption's SIGTERM reaches it.
    wait_until(lambda: list((run_dir / "status").glob("stop-*.json")), 60, "the ranks' SIGTERM", job_id)
    info = wait_for_job(job_id, timeout=600)
    t_end = time.monotonic()
    log = slurm_log(run_dir)
    assert info["JobState"] == "COMPLETED", log[-4000:]
    assert info["Restarts"] == "1", info
    assert wait_for_job(high, timeout=60)["JobState"] == "COMPLETED"

    runs = attempts(run_dir)
    first = [a for a in runs if a["job_restart"] == 0]
    second = [a for a in runs if a["job_restart"] == 1]
    ranks = 2
    assert len(first) == ranks and len(second) == ranks, runs
    saved = {a["reached"] for a in first}
    assert len(saved) == 1, runs  # every rank stopped at the same iteration
    saved_at = saved.pop()
    # Saved on the signal: past the periodic checkpoint that was there when it came.
    assert saved_at > seen, (seen, runs)
    assert len({a["params_sha256"] for a in first}) == 1, runs
    names = {iteration_of(p.name): p for p in run_dir.glob(pattern) if iteration_of(p.name) is not None}
    assert saved_at in names, sorted(names)
    # The second run started from exactly that checkpoint and trained on to the end.
    assert {a["started_from"] for a in second} == {saved_at}, runs
    assert {a["resume_from"] for a in second} == {str(names[saved_at])}, runs
    if updates is not None:
        # rsl-rl numbers its iterations from 0: learn(40) ends at iteration 39.
        last = updates - 1 if library == "rsl_rl" else updates
        assert {a["reached"] for a in second} == {last}, runs
    else:
        assert all(a["reached"] > saved_at for a in second), runs

    rank0 = (run_dir / "logs" / "rank-0.log").read_text(errors="replace")
    assert re.search(r"hpctrain: stop: SIGTERM: ", rank0), rank0[-3000:]
    stamp = r"\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\] hpctrain: "
    assert re.search(stamp + re.escape(f"preemption: preempted by the scheduler: requeueing job {job_id} "
                                       "(requeue 1 of at most "), log), log[-4000:]
    assert re.search(stamp + re.escape("done: all ranks exited 0"), log), log[-4000:]
    assert not (run_dir / "status" / "failure.json").exists()

    # The resumed run trained, on every rank, to the same weights, across both nodes.
    results = read_results(run_dir)
    check_trained(results, log, world=ranks, hosts=2)
    assert library == "di_engine" or all(r["library"] == library for r in results), results
    if library != "di_engine":
        assert [r["rank"] for r in results if r["checkpoint"]] == [0]  # rank 0 only
    check_progress(cli, job_id, run_dir, results, library,
                   per_update=STEPS if library.startswith("skrl") else 1)
    print(f"{library} real preemption: job {job_id}, periodic checkpoint at {seen} after "
          f"{t_preempt - t0:.1f} s, saved at {saved_at}, completed {t_end - t_preempt:.1f} s "
          f"after the high job was submitted, {t_end - t0:.1f} s in all")

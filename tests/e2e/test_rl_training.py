"""Real training through hpctrain: each RL library's own distributed mode, on the real cluster.

2 nodes x 2 ranks (world 4 over two hosts), a few updates: every rank finishes, rank 0 writes the
library's own checkpoint, every rank started from rank 0's weights, its weights moved from them and
the library's own loss moved between its first and last update (it trained), and the policy weights
are identical on every rank at the end.
"""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, read_results, submitted, wait_for_job
from tests.e2e.learning import check_learned


LIBRARIES = {  # job file -> the checkpoint glob its adapter declares for resume
    "rl_games": ("examples/rl/rl_games_pendulum.yaml", "checkpoints/nn/*.pth"),
    "rsl_rl": ("examples/rl/rsl_rl_pendulum.yaml", "checkpoints/model_*.pt"),
    "skrl": ("examples/rl/skrl_torch_pendulum.yaml", "checkpoints/agent_*.pt"),
    "skrl_jax": ("examples/rl/skrl_jax_pendulum.yaml", "checkpoints/agent_*.pickle"),
}

# rl-games and rsl-rl: rollouts long enough that Pendulum's 200-step episodes end before the
# last update: only then has the library a mean reward, the metric the hooks report. The skrl
# examples turn skrl's tracking off (write_interval 0: it would clear the losses they read), and
# with it its episode rewards: their jobs' own args, and no metric is expected.
# skrl's progress counts environment timesteps (--steps per update), the others iterations.
ARGS = {
    "rl_games": ["--updates", "3", "--steps", "70"],
    "rsl_rl": ["--updates", "3", "--steps", "70"],
    "skrl": ["--updates", "3"],
    "skrl_jax": ["--updates", "2", "--num-envs", "8", "--steps", "8"],
}
PROGRESS_STEP = {
    "rl_games": lambda iteration: iteration,
    "rsl_rl": lambda iteration: iteration,
    "skrl": lambda iteration: iteration * 32,
    "skrl_jax": lambda iteration: iteration * 8,
    "di_engine": lambda iteration: iteration,
}
MAIN_METRIC = {"rl_games": "reward", "rsl_rl": "reward", "di_engine": "loss"}


def cluster_log(run_dir: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in (run_dir / "logs").glob("slurm-*.out"))


def check_progress(cli, ref: str, run_dir: Path, results: list[dict], library: str) -> None:
    """The library hooks (hpctrain/rank/train_hooks.py) reported every rank's last iteration and
    finite metrics (the library's main one where the run has it), and `status --json` carries
    them."""
    from hpctrain.rank.records import read_progress
    reports = {p.rank: p for p in read_progress(str(run_dir))}
    assert sorted(reports) == sorted(r["rank"] for r in results), reports
    for r in results:
        p = reports[r["rank"]]
        assert p.step == PROGRESS_STEP[library](r["iteration"]), (p, r)
        assert all(math.isfinite(v) for v in p.metrics.values()), p
    # rsl-rl keeps episode rewards on rank 0 only; ding's learner reports its loss (the rewards
    # are its collector's). Rank 0's are what `status` shows.
    if library in MAIN_METRIC:
        assert MAIN_METRIC[library] in reports[0].metrics, reports[0]
    [shown] = json.loads(cli("status", ref, "--json").stdout)["progress"]
    assert shown["step"] == shown["min_step"] == reports[0].step, shown
    assert shown["metrics"] == reports[0].metrics, shown
    if library in MAIN_METRIC:
        assert shown["metric"] == MAIN_METRIC[library] and math.isfinite(shown["value"]), shown
    assert [r["rank"] for r in shown["ranks"]] == sorted(reports), shown


def check_plot(cli, job_id: str, run_dir: Path, results: list[dict], tmp_path: Path) -> None:
    """`hpctrain plot` on the event files rsl-rl's own logger wrote (rank 0, its log_dir): its
    own tags, one point per learning iteration, in a non-empty PNG."""
    from hpctrain.follow.curves import read_run
    png = tmp_path / "rsl_rl.png"
    out = cli("plot", job_id, "--out", png).stdout
    assert out.splitlines()[-1] == str(png), out
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    [scalars] = read_run(str(run_dir))
    assert "Loss/value" in scalars.tags and "Perf/total_fps" in scalars.tags, scalars.tags
    [last] = {r["iteration"] for r in results}
    curve = scalars.curve("Loss/value")
    assert curve.steps == list(range(last + 1)) and curve.attempts == 1, curve
    assert all(math.isfinite(v) for v in curve.values), curve
    assert f"Loss/value {last + 1} points" in out, out


def completed_on_cluster(cli, *submit_args) -> tuple[str, Path, str, list[dict]]:
    """Submit to the cluster and wait for the job: it must complete. (job id, run dir, the
    batch log, every rank's results)."""
    job_id, run_dir = submitted(cli("submit", *submit_args).stdout)
    info = wait_for_job(job_id, timeout=400)
    log = cluster_log(run_dir)
    assert info["JobState"] == "COMPLETED", log[-4000:]
    return job_id, run_dir, log, read_results(run_dir)


def check_trained(results: list[dict], log: str, world: int, hosts: int) -> None:
    assert sorted(r["rank"] for r in results) == list(range(world)), log[-3000:]
    assert {r["world_size"] for r in results} == {world}
    assert len({r.get("hostname") or r.get("host") for r in results}) == hosts, results
    digests = {r["params_sha256"] for r in results}
    assert len(digests) == 1, f"weights differ across ranks: {results}"
    check_learned(results)


@pytest.mark.parametrize("library", list(LIBRARIES))
def test_library_trains_on_two_nodes(library, cli, cluster, tmp_path):
    from hpctrain.libraries import adapter
    job_file, pattern = LIBRARIES[library]
    assert pattern in adapter(library).checkpoint_globs  # what resume will look for is what is written
    t0 = time.monotonic()
    job_id, run_dir, log, results = completed_on_cluster(
        cli, job_file, "--site", cluster, "--set", f"python={sys.executable}",
        "--set", f"args=[{','.join(ARGS[library])}]")
    check_trained(results, log, world=4, hosts=2)
    assert all(r["library"] == library for r in results)
    ckpts = sorted(run_dir.glob(pattern))
    assert ckpts, f"no checkpoint matching {pattern} in {run_dir}"
    assert [r["rank"] for r in results if r["checkpoint"]] == [0]  # rank 0 only
    check_progress(cli, job_id, run_dir, results, library)
    if library == "rsl_rl":  # the cheapest of those whose own logger writes TensorBoard files
        check_plot(cli, job_id, run_dir, results, tmp_path)
    print(f"{library}: 2x2 job {job_id} end to end {time.monotonic() - t0:.1f} s")


def write_failing_program(tmp_path: Path, rank_variable: str) -> Path:
    script = tmp_path / "fail_one_rank.py"
    script.write_text(
        "import os, sys, time\n"
        f"rank = int(os.environ['{rank_variable}'])\n"
        "if rank == 1:\n"
        "    sys.exit(3)\n"
        "time.sleep(3600)  # the others would wait for their peer forever: they must be stopped\n"
        "print('rank', rank, 'slept through')\n")
    return script


def test_failed_jax_rank_fails_the_job(cli, cluster, tmp_path):
    script = write_failing_program(tmp_path, "JAX_RANK")  # also proves the JAX_* mapping
    proc = cli("submit", "examples/rl/skrl_jax_pendulum.yaml", "--site", cluster,
               "--set", f"python={sys.executable}", "--set", f"script={script}", "--set", "args=[]")
    job_id, run_dir = submitted(proc.stdout)
    info = wait_for_job(job_id, timeout=400)
    log = cluster_log(run_dir)
    assert info["JobState"] == "FAILED" and info["ExitCode"] != "0:0", log
    head = re.search(r"rendezvous: (\w+):", log).group(1)
    # Block distribution: ranks 0 and 1 on the first node; the script names rank and node.
    assert f"failure: rank 1 on {head} failed (exit status 3)" in log, log
    assert (run_dir / "status" / "rank-1.failed.json").is_file()


def wait_local(run_dir: Path, timeout: float = 180) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        f = run_dir / "status" / "exit_code"
        if f.is_file() and f.read_text().strip():
            return int(f.read_text())
        time.sleep(0.3)
    raise AssertionError(f"local job in {run_dir} did not finish in {timeout}s")


def test_failed_jax_rank_fails_the_local_job(cli, tmp_path):
    script = write_failing_program(tmp_path, "JAX_RANK")
    proc = cli("submit", "examples/rl/skrl_jax_pendulum.yaml", "--set", "resources.nodes=1",
               "--set", f"python={sys.executable}", "--set", f"script={script}", "--set", "args=[]")
    _, run_dir = submitted(proc.stdout)
    assert wait_local(run_dir, timeout=600) != 0  # ended: rank 0 was stopped, not left sleeping
    log = (run_dir / "logs" / "job.out").read_text()
    assert "failure: rank 1 on" in log and "(exit status 3)" in log, log
    assert "slept through" not in log


def test_cartpole_ppo_on_this_machine(cli):
    """The README's first example, as a user runs it: default site, 1 node x 2 ranks."""
    t0 = time.monotonic()
    proc = cli("submit", "examples/cartpole_ppo.yaml", "--set", f"python={sys.executable}")
    _, run_dir = submitted(proc.stdout)
    assert wait_local(run_dir, timeout=120) == 0, (run_dir / "logs" / "job.out").read_text()
    elapsed = time.monotonic() - t0
    results = read_results(run_dir)
    check_trained(results, "", world=2, hosts=1)
    assert {r["backend"] for r in results} == {"gloo"}
    assert len({r["mean_return"] for r in results}) == 1  # summed across ranks: one value
    assert results[0]["mean_return"] > 30  # a random policy gets ~22: it learned
    assert list(run_dir.glob("checkpoints/policy_*.pt"))
    print(f"cartpole local 1x2: {elapsed:.1f} s")


def test_cartpole_ppo_on_two_nodes(cli, cluster):
    _, run_dir, log, results = completed_on_cluster(
        cli, "examples/cartpole_ppo.yaml", "--site", cluster, "--set", "resources.nodes=2",
        "--set", f"python={sys.executable}")
    check_trained(results, log, world=4, hosts=2)
    assert list(run_dir.glob("checkpoints/policy_*.pt"))


DING_PYTHON = ROOT / ".venv-ding" / "bin" / "python"


@pytest.fixture(scope="session")
def ding_python():
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "install-ding-venv.sh")],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"scripts/install-ding-venv.sh failed:\n{proc.stdout}\n{proc.stderr}")
    return DING_PYTHON


def test_di_engine_ddp_on_this_machine(cli, ding_python):
    t0 = time.monotonic()
    proc = cli("submit", "examples/di_engine/cartpole_dqn_ddp.yaml", "--set", f"python={ding_python}")
    _, run_dir = submitted(proc.stdout)
    code = wait_local(run_dir, timeout=300)
    log = (run_dir / "logs" / "job.out").read_text(errors="replace")
    assert code == 0, log[-4000:]
    results = read_results(run_dir)
    assert sorted(r["rank"] for r in results) == [0, 1], log[-3000:]  # not two rank-0 worlds
    assert {r["world_size"] for r in results} == {2}
    assert len({r["params_sha256"] for r in results}) == 1, results
    check_learned(results)
    assert list(run_dir.glob("cartpole_dqn_ddp/ckpt/iteration_*.pth.tar"))  # ./<exp_name> in the run
    check_progress(cli, str(run_dir), run_dir, results, "di_engine")
    print(f"di_engine local 1x2: {time.monotonic() - t0:.1f} s")


def test_di_engine_scalar_reductions_survive_uneven_episodes(cli, ding_python, tmp_path):
    """ding's DDP collector all-reduces an int on a rank without a finished episode and a float
    on one with (a resumed DQN run aborted in gloo: "8 vs 4"); under hpctrain every rank gets
    the same sums, in the types it passed."""
    job = tmp_path / "job.yaml"
    job.write_text(f"name: ding-uneven\nlibrary: di_engine\n"
                   f"config: {ROOT / 'tests' / 'programs' / 'ding_uneven_counts.py'}\n"
                   "resources: {procs_per_node: 2}\n")
    proc = cli("submit", str(job), "--set", f"python={ding_python}")
    _, run_dir = submitted(proc.stdout)
    code = wait_local(run_dir, timeout=180)
    log = (run_dir / "logs" / "job.out").read_text(errors="replace")
    assert code == 0, log[-4000:]
    results = sorted(read_results(run_dir), key=lambda r: r["rank"])
    assert [r["rank"] for r in results] == [0, 1], log[-3000:]
    for r in results:
        assert r["duration"] == 0.75 and r["samples"] == 17 and r["mean"] == 1.5, r
        assert r["types"]["samples"] == "int" and r["types"]["duration"] == "float", r
    assert results[0]["reduced"] == 3, results


def test_di_engine_trains_on_two_nodes(cli, cluster, ding_python):
    """DI-engine's DDP pipeline across two hosts, one rank each (world 2 over node boundaries):
    the same checks as the other libraries' 2-node runs. On GPUs its LogReduceHook puts tensors
    on cuda:<global rank> (the adapter warns about it); in CPU mode that device is the CPU, so
    the pipeline itself runs across nodes here."""
    job_id, run_dir, log, results = completed_on_cluster(
        cli, "examples/di_engine/cartpole_dqn_ddp.yaml", "--site", cluster,
        "--set", f"python={ding_python}", "--set", "resources.nodes=2",
        "--set", "resources.procs_per_node=1")
    check_trained(results, log, world=2, hosts=2)
    assert list(run_dir.glob("cartpole_dqn_ddp/ckpt/iteration_*.pth.tar"))  # ./<exp_name> in the run
    check_progress(cli, job_id, run_dir, results, "di_engine")

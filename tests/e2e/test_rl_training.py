"""Real training through hpctrain: plain DDP and DI-engine, here and on the real cluster, and a
failing JAX rank. Each stock library's own distributed mode trains on 2 nodes x 2 ranks in
test_preempt_rl.py, through a preemption and its resume (one real run proves both).

Every rank finishes, every rank started from rank 0's weights, its weights moved from them and
the training's own loss moved between its first and last update (it trained), and the weights
are identical on every rank at the end (learning.py).
"""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, read_results, submitted, wait_for_job
from tests.e2e.learning import check_learned, check_progress, check_trained
from tests.slurm.survive import SIDE


def cluster_log(run_dir: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in (run_dir / "logs").glob("slurm-*.out"))


def completed_on_cluster(cli, *submit_args) -> tuple[str, Path, str, list[dict]]:
    """Submit to the cluster and wait for the job: it must complete. (job id, run dir, the
    batch log, every rank's results)."""
    job_id, run_dir = submitted(cli("submit", *submit_args).stdout)
    info = wait_for_job(job_id, timeout=400)
    log = cluster_log(run_dir)
    assert info["JobState"] == "COMPLETED", log[-4000:]
    return job_id, run_dir, log, read_results(run_dir)


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
    proc = cli("submit", "examples/rl/skrl_jax_pendulum.yaml", "--site", cluster, *SIDE,
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
        cli, "examples/cartpole_ppo.yaml", "--site", cluster, *SIDE, "--set", "resources.nodes=2",
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



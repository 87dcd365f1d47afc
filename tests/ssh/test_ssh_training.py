"""Real training over ssh, on 2 hosts of the local cluster's sshds (site locallab, no
scheduler): one run per launch class — torchrun on each host (rsl-rl, the stock library with the
most hooks, and the plain-DDP examples) and one process per rank (JAX: skrl_jax) — with the
checks of tests/e2e: every rank started from rank 0's weights, ended with the same weights,
which moved, and the library's own loss moved in between; the run directory is the one Slurm
runs get. rl-games and skrl (torch) start exactly as rsl-rl does here (one torchrun per host);
their own distributed modes train on two Slurm nodes in tests/e2e/test_preempt_rl.py."""
from __future__ import annotations

import json
import sys
import time

import pytest

from tests.conftest import jax_cache_env, read_results, submitted
from tests.e2e.learning import check_trained
from tests.ssh.helpers import job_log, leftovers


LIBRARIES = {  # job file -> the checkpoint glob its adapter declares for resume
    "rsl_rl": ("examples/rl/rsl_rl_pendulum.yaml", "checkpoints/model_*.pt"),
    "skrl_jax": ("examples/rl/skrl_jax_pendulum.yaml", "checkpoints/agent_*.pickle"),
}


# rsl-rl on 2 hosts x 2 ranks (ranks sharing a host, one torchrun each); skrl_jax on 2 x 1: its
# tasks launcher starts 2 per node in tests/local, and each JAX rank here is ~15 core-seconds.
SHAPE = {"rsl_rl": 2, "skrl_jax": 1}


@pytest.mark.parametrize("library", list(LIBRARIES))
def test_library_trains_on_two_hosts(library, cli, lab):
    job_file, pattern = LIBRARIES[library]
    t0 = time.monotonic()
    # ssh passes the hosts nothing of this environment: the suite's JAX compile cache goes in
    # the job's env (tests/conftest.py jax_cache_env).
    cache = [w for k, v in jax_cache_env().items() for w in ("--set", f"env.{k}={v}")]
    proc = cli("submit", job_file, "--site", lab, "--set", f"python={sys.executable}", "--wait",
               "--set", f"resources.procs_per_node={SHAPE[library]}",
               *(cache if library == "skrl_jax" else []), check=False, timeout=900)
    job_id, run_dir = submitted(proc.stdout)
    log = job_log(run_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr + log[-4000:]
    results = read_results(run_dir)
    check_trained(results, log, world=2 * SHAPE[library], hosts=2)
    assert {r.get("hostname") or r.get("host") for r in results} == {"node5", "node6"}
    assert all(r["library"] == library for r in results)
    assert sorted(run_dir.glob(pattern)), f"no checkpoint matching {pattern} in {run_dir}"
    assert [r["rank"] for r in results if r["checkpoint"]] == [0]
    assert leftovers(run_dir) == {"node5": [], "node6": []}
    print(f"{library}: 2x{SHAPE[library]} over ssh, job {job_id}, end to end {time.monotonic() - t0:.1f} s")


def test_cartpole_ppo_on_two_hosts(cli, lab):
    # One rank per host: ddp_check below proves the 2x2 layout; here, the example trains.
    proc = cli("submit", "examples/cartpole_ppo.yaml", "--site", lab, "--set", "resources.nodes=2",
               "--set", "resources.procs_per_node=1", "--set", f"python={sys.executable}", "--wait",
               check=False, timeout=900)
    _, run_dir = submitted(proc.stdout)
    log = job_log(run_dir)
    assert proc.returncode == 0, log[-4000:]
    check_trained(read_results(run_dir), log, world=2, hosts=2)
    assert list(run_dir.glob("checkpoints/policy_*.pt"))


def test_ddp_check_same_rendezvous_bootstrap_and_run_directory(cli, lab):
    # The submitting shell's stale rank identity does not reach the hosts (ssh passes nothing of
    # it; the script's environment part would clear it anyway).
    stale = {"RANK": "7", "WORLD_SIZE": "99", "MASTER_ADDR": "127.0.0.1", "HPCTRAIN_SEED": "5"}
    proc = cli("submit", "examples/ddp_check.yaml", "--site", lab, "--set",
               f"python={sys.executable}", "--wait", env=stale, timeout=600)
    job_id, run_dir = submitted(proc.stdout)
    assert f"{job_id}: COMPLETED" in proc.stdout, proc.stdout  # what --wait shows at the end
    assert job_id.startswith("node5:")  # the batch shell's pid on the head
    log = job_log(run_dir)
    results = read_results(run_dir)
    assert sorted(r["rank"] for r in results) == [0, 1, 2, 3], log
    assert {r["world_size"] for r in results} == {4}
    assert {r["allreduce"] for r in results} == {6.0}
    assert [r["host"] for r in sorted(results, key=lambda r: r["rank"])] == ["node5", "node5", "node6", "node6"]
    assert sorted(r["seed"] for r in results) == ["1234", "1235", "1236", "1237"]
    for name in ("job.yaml", "job.sh", "rank/__main__.py", "bootstrap.json", "run.json",
                 "logs/job.out", "logs/rank-3.log", "status/rank-3.json", "status/exit_code"):
        assert (run_dir / name).is_file(), name
    record = json.loads((run_dir / "run.json").read_text())
    assert record["backend"] == "ssh" and record["job_id"] == job_id and record["site"] == "locallab"
    assert record["ssh"]["hosts"] == ["node5", "node6"] and record["git"]["commit"]
    # Head = the first host, resolved on the head, not loopback; the port derives from the job id.
    import re
    m = re.search(r"rendezvous: node5:(\d+) \(10\.231\.0\.15\), 2 nodes: node5,node6", log)
    assert m, log
    rdzv_id = int(re.search(r"--rdzv-id=(\d+)", log).group(1))
    assert int(m.group(1)) == 61000 + 2 * (rdzv_id % 2268)
    assert re.search(r"hpctrain preflight: all 2 nodes reached node5:\d+ in [\d.]+ s", log), log
    assert "preflight: all 4 ranks met" in log
    assert "[rank 3] rank 3/4 on node6" in log  # every host's output in one log, prefixed

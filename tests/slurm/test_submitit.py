"""The Python API through submitit, on the real local Slurm cluster: functions on every rank,
the job's own command, failures named by rank, and what the run directory records."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

import hpctrain
from hpctrain.runs.records import indexed
from tests.conftest import job_state, wait_for_job
from tests.operate_helpers import WORKER


TIMEOUT = 300


def allreduce(scale: float = 1.0) -> dict:
    """Every rank all-reduces its rank; rank 0's view comes back through handle.result()."""
    import os

    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank()) * scale])
    dist.all_reduce(t)
    hosts = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, os.environ.get("SLURMD_NODENAME") or socket.gethostname())
    out = {"sum": t.item(), "world_size": dist.get_world_size(), "rank": dist.get_rank(),
           "hosts": hosts, "master": f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
           "local_world_size": int(os.environ["LOCAL_WORLD_SIZE"]),
           "seed": os.environ.get("HPCTRAIN_SEED"), "cpu_mode": os.environ.get("HPCTRAIN_CPU_MODE"),
           "threads": os.environ.get("OMP_NUM_THREADS")}
    dist.destroy_process_group()
    return out


def fail_on_rank_one() -> int:
    import os
    if os.environ["RANK"] == "1":
        raise ValueError("boom on purpose")
    return 0


def _job(cluster, **values):
    values.setdefault("resources", {"nodes": 2, "procs_per_node": 2, "time": "00:05:00"})
    return hpctrain.load_job(name="pyfn", site=cluster, seed=100, **values)


def test_function_on_two_nodes(cli, cluster):
    h = hpctrain.submit_function(allreduce, _job(cluster), 2.0)
    out = h.result(timeout=TIMEOUT)
    assert out["rank"] == 0
    assert out["world_size"] == 4 and out["local_world_size"] == 2
    assert out["sum"] == 12.0  # 2 * (0+1+2+3)
    assert len(set(out["hosts"])) == 2, out["hosts"]  # two distinct nodes
    first_node = sorted(set(out["hosts"]))[0]
    assert out["master"].split(":")[0] == first_node  # head = first node of the job's list
    port = int(out["master"].split(":")[1])
    assert port == 61000 + 2 * (int(h.job_id) % 2268)  # the site's port rule on the job id
    assert out["seed"] == "100" and out["cpu_mode"] == "1" and out["threads"] == "1"
    assert [r["rank"] for r in h.results()] == [0, 1, 2, 3]
    assert sorted(r["seed"] for r in h.results()) == ["100", "101", "102", "103"]
    assert h.status().state == "COMPLETED"
    # The bootstrap's tee: each rank's own log file, and "[rank R]" lines on the job's console.
    assert "completed successfully" in h.logs(rank=3)
    assert "[rank 3] " in h.logs()

    # What ran is recorded: callable, its source and hash, the job, git state; in the index.
    rec = json.loads((h.run_dir / "run.json").read_text())
    assert rec["backend"] == "submitit" and rec["kind"] == "function"
    assert rec["job_id"] == h.job_id and rec["site"] == cluster
    fn = rec["function"]
    assert fn["module"] == __name__ and fn["qualname"] == "allreduce"
    assert fn["source_file"] == __file__ and len(fn["source_sha256"]) == 64
    assert (h.run_dir / "function.py").read_text().startswith("def allreduce(")
    assert rec["git"]["commit"]
    assert (h.run_dir / "job.yaml").is_file() and "name: pyfn" in (h.run_dir / "job.yaml").read_text()
    assert (h.run_dir / "submitit" / f"{h.job_id}_submitted.pkl").exists()
    assert h.run_dir.parent.name == "pyfn"
    assert any(e["run_id"] == h.run_id and e["job_id"] == h.job_id for e in indexed())
    again = hpctrain.Handle(h.job_id)  # found later from the index, like a CLI run
    assert again.run_dir == h.run_dir and again.result()["sum"] == 12.0
    # The shell sees the same run: `hpctrain status` and `list` answer for Python runs too.
    from hpctrain.follow.operate import status
    assert status(h.run_id).state.state == "COMPLETED"
    # Function runs write the same per-rank records as any run: logs by rank and by node work.
    idents = {json.loads(p.read_text())["rank"]: json.loads(p.read_text())["node"]
              for p in (h.run_dir / "status").glob("rank-*.json")}
    assert sorted(idents) == [0, 1, 2, 3] and set(idents.values()) == set(out["hosts"])
    assert "completed successfully" in cli("logs", h.run_id, "--rank", "2").stdout
    node = idents[3]
    by_node = cli("logs", h.run_id, "--node", node).stdout
    for rank in (r for r, n in idents.items() if n == node):
        assert f"==> rank {rank} <==" in by_node


def test_exception_names_rank_and_node(home, cluster):
    h = hpctrain.submit_function(fail_on_rank_one, _job(
        cluster, resources={"nodes": 2, "procs_per_node": 1, "time": "00:05:00"}))
    with pytest.raises(hpctrain.JobFailed) as err:
        h.result(timeout=TIMEOUT)
    e = err.value
    assert e.rank == 1
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout
    assert e.node in nodes.split()  # a node of the cluster, whichever partition ran it
    assert "rank 1 on node" in str(e) and "ValueError: boom on purpose" in str(e)
    assert isinstance(e, hpctrain.HpctrainError)
    assert h.status().state == "FAILED"


def test_python_submit_is_the_clis_submit(home, cluster):
    h = hpctrain.submit("examples/ddp_check.yaml", site=cluster,
                        overrides=[f"python={sys.executable}", "resources.procs_per_node=1"])
    out = h.result(timeout=TIMEOUT)
    assert out["exit_code"] == 0 and out["job"] == h.job_id
    results = [json.loads(p.read_text()) for p in sorted((h.run_dir / "results").glob("rank-*.json"))]
    assert sorted(r["rank"] for r in results) == [0, 1], h.logs()
    assert {r["allreduce"] for r in results} == {1.0}
    assert len({r["host"] for r in results}) == 2
    rec = json.loads((h.run_dir / "run.json").read_text())
    assert rec["backend"] == "slurm" and rec["kind"] == "command" and rec["script"] == "job.sbatch"
    assert "rendezvous: node" in h.logs()


def test_handle_cancel_ends_the_job(home, cluster):
    h = hpctrain.submit({"name": "handle-cancel", "script": str(WORKER), "python": sys.executable,
                         "args": ["--seconds", "600"],
                         "resources": {"nodes": 2, "procs_per_node": 1, "time": "00:15:00"}},
                        site=cluster)
    deadline = time.monotonic() + TIMEOUT
    while h.status().state != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.5)
    h.cancel()
    # The cancel lands right after the job starts, often while the preflight step runs. That
    # step then fails too, and the batch shell used to requeue the job for it: twice in CI the
    # cancelled job came back and ran on (tests/slurm/test_survive.py has the deterministic
    # test). A failure shows Slurm's view of the job.
    try:
        state = h.wait(timeout=TIMEOUT)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\nSlurm's record: {job_state(h.job_id)}\n{h.logs()[-3000:]}") from None
    assert state.state == "CANCELLED"
    assert wait_for_job(h.job_id, timeout=60)["JobState"] == "CANCELLED"


def test_user_mistakes_are_clear(home, cluster, monkeypatch):
    with pytest.raises(hpctrain.HpctrainError, match="unknown site 'localclustr'") as err:
        hpctrain.load_job(name="x", site="localclustr")
    assert "did you mean 'localcluster'" in str(err.value)
    with pytest.raises(hpctrain.HpctrainError, match="allows at most 4 nodes"):
        _job(cluster, resources={"nodes": 9})
    import threading
    lock = threading.Lock()
    with pytest.raises(hpctrain.HpctrainError, match="cannot be pickled") as err:
        hpctrain.submit_function(lambda: lock.locked(), _job(cluster))
    assert "create locks" in str(err.value)
    # The job's own partition reaches sbatch only where no SBATCH_PARTITION overrides it (as
    # scripts/test-all.sh sets for the sessions beside the Slurm tier).
    monkeypatch.delenv("SBATCH_PARTITION", raising=False)
    bad = _job(cluster, resources={"nodes": 1, "partition": "nosuchpartition"})
    with pytest.raises(hpctrain.HpctrainError, match="sbatch refused the job") as err:
        hpctrain.submit_function(allreduce, bad)
    assert "invalid partition" in str(err.value).lower()
    with pytest.raises(hpctrain.HpctrainError, match="has no 'script'"):
        hpctrain.submit(_job(cluster))


def test_local_site_through_submitits_local_executor(home):
    """Site `local`: no scheduler; submitit's local executor starts one process per rank."""
    job = hpctrain.load_job(name="pylocal", site="local", seed=7,
                            resources={"procs_per_node": 2, "time": "00:05:00"})
    h = hpctrain.submit_function(allreduce, job)
    out = h.result(timeout=TIMEOUT)
    assert out["world_size"] == 2 and out["sum"] == 1.0 and out["seed"] == "7"
    assert out["master"].startswith("127.0.0.1:")
    assert h.status().state == "COMPLETED"
    assert json.loads((h.run_dir / "run.json").read_text())["scheduler"] == "local"
    assert (h.run_dir / "logs" / "rank-1.log").is_file()

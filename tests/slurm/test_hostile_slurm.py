"""Hostile input on the real cluster: payloads through sbatch, srun, torchrun and the rank side to
the program on two nodes; and `submit` killed with -9 at every step of a Slurm submission."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, submitted, wait_for_job
from tests.hostile import canary_payloads, tried
from tests.operate_helpers import job_file, status_json, wait_state

pytestmark = pytest.mark.slurm
ECHO = ROOT / "tests" / "programs" / "echo_rank.py"
SUBMIT_UNTIL = ROOT / "tests" / "programs" / "submit_until.py"


def test_payloads_reach_the_program_byte_exact_on_two_nodes(cli, cluster, tmp_path):
    canary = tmp_path / "CANARY"
    payloads = canary_payloads(str(canary))
    weird = tmp_path / "we'ird $(touch CANARY) dir; `x`"
    weird.mkdir()
    program = weird / "echo $rank.py"
    shutil.copy(ECHO, program)
    env = {f"HOSTILE_{i}": p for i, p in enumerate(payloads)}
    (weird / "job.yaml").write_text(yaml.safe_dump({
        "name": "hostile-slurm", "script": program.name, "args": payloads, "env": env,
        "python": sys.executable, "setup": [f"echo {p!r} >/dev/null" for p in ("$(id)", "a;b")],
        "resources": {"nodes": 2, "procs_per_node": 1, "time": "00:05:00"}}))
    tried("execution", 2 * len(payloads) + 2)
    job_id, run_dir = submitted(cli("submit", "job.yaml", "--site", cluster, cwd=weird).stdout)
    info = wait_for_job(job_id, timeout=300)
    assert info["JobState"] == "COMPLETED", (run_dir / "logs").glob("*")
    seen = [json.loads(p.read_text()) for p in sorted(run_dir.glob("results/rank-*.json"))]
    assert len(seen) == 2 and {s["env"]["SLURMD_NODENAME"] for s in seen} == {"node1", "node2"} \
        or len({s["env"]["SLURMD_NODENAME"] for s in seen}) == 2
    for rank in seen:
        assert rank["argv"] == payloads
        assert {k: rank["env"].get(k) for k in env} == env
        # The job runs the copy of its code taken at submit (hpctrain/snapshot.py), in the run.
        code = run_dir / "code"
        assert rank["cwd"] == str(code) and rank["script"] == str(code / program.name)
    assert not canary.exists() and not (weird / "CANARY").exists()


def _jobs_of(run_dir: Path) -> list[dict]:
    """Slurm's own records of the jobs whose output lies in this run directory."""
    text = subprocess.run(["squeue", "--json", "--all", "--states=all"], capture_output=True,
                          text=True, check=True).stdout
    return [j for j in json.loads(text)["jobs"]
            if str(j.get("standard_output", "")).startswith(f"{run_dir}/logs/")]


POINTS = ["before-record", "after-index", "after-files", "after-start", "after-job-id",
          "fail-record"]


@pytest.mark.parametrize("point", POINTS)
def test_slurm_submit_killed_at_any_step(point, cli, cluster, tmp_path):
    tried("crash")
    name = f"skilled-{point}"
    jf = job_file(tmp_path, name, nodes=1, procs=1, args=["--seconds", "120"])
    proc = subprocess.run([sys.executable, str(SUBMIT_UNTIL), point, str(jf), "--site", cluster],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    runs = list((Path(os.environ["HPCTRAIN_RUNS_DIR"]) / name).glob("*"))
    if point == "fail-record":
        assert proc.returncode == 2, proc.stderr
        job = proc.stderr.split("job ", 1)[1].split()[0]
        assert wait_for_job(job, timeout=60)["JobState"] == "CANCELLED"
        assert not runs
        return
    assert proc.returncode == -9, proc.stderr
    if point == "before-record":
        assert all(not _jobs_of(r) for r in runs)
        return
    [run_dir] = runs
    listed = [r for r in json.loads(cli("list", "--json").stdout) if r["name"] == name]
    assert len(listed) == 1
    if point in ("after-index", "after-files"):
        st = status_json(cli, run_dir.name)
        assert st["state"]["state"] == "LOST" and not _jobs_of(run_dir), st
        return
    # sbatch had queued the job: status finds it by its output path, cancel stops it.
    st = wait_state(cli, run_dir.name, {"PENDING", "RUNNING"})
    [job] = _jobs_of(run_dir)
    assert st["job"] == str(job["job_id"]), st
    cli("cancel", run_dir.name)
    assert wait_for_job(str(job["job_id"]), timeout=60)["JobState"] == "CANCELLED"
    assert status_json(cli, run_dir.name)["state"]["state"] == "CANCELLED"

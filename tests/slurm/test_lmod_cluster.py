"""Modules under the rendered Slurm script on the cluster's nodes, with Debian's real Lmod and the
modulefiles of tests/cluster/modulefiles, submitted from an environment without USER/LOGNAME
(where /etc/profile.d/lmod.sh itself dies under `set -u`)."""
from __future__ import annotations

import json
import os
import sys

import yaml

from tests.conftest import ROOT, submitted, wait_for_job
from tests.slurm.survive import slurm_log

MODULES = ROOT / "tests" / "cluster" / "modulefiles"
PROGRAM = ROOT / "tests" / "programs" / "echo_rank.py"


def site(tmp_path, modules):
    doc = {"name": "lmodcluster", "scheduler": "slurm", "cpu_mode": "on",
           "module_init": "/etc/profile.d/lmod.sh", "modules": modules,
           "defaults": {"resources": {"partition": "debug", "time": "00:05:00", "mem": "500M"},
                        "env": {"OMP_NUM_THREADS": "1"}}}
    path = tmp_path / "lmodcluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def submit(cli, tmp_path, modules):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"name": "lmod", "script": str(PROGRAM), "python": sys.executable,
                                   "resources": {"nodes": 2}}))
    env = {k: v for k, v in os.environ.items() if k not in ("USER", "LOGNAME")}
    env["MODULEPATH"] = str(MODULES)
    proc = cli("submit", job, "--site", site(tmp_path, modules), env=env)
    job_id, run_dir = submitted(proc.stdout)
    return job_id, run_dir, wait_for_job(job_id, timeout=240)


def test_modules_reading_unset_variables_load_on_the_nodes(cli, cluster, tmp_path):
    job_id, run_dir, info = submit(cli, tmp_path, ["hpct-good", "hpct-unsetvar", "hpct-shellunset"])
    assert info["JobState"] == "COMPLETED", slurm_log(run_dir)
    for rank in (0, 1):  # both nodes' ranks got the modules' environment
        env = json.loads((run_dir / "results" / f"rank-{rank}.json").read_text())["env"]
        assert env["HPCT_GOOD"] == "1.0" and env["HPCT_SHELLUNSET"] == "1.0", env
        assert env["HPCT_UNSETVAR"] == "loaded"
    nodes = {json.loads((run_dir / "results" / f"rank-{r}.json").read_text())["env"]["SLURMD_NODENAME"]
             for r in (0, 1)}
    assert len(nodes) == 2


def test_a_failing_module_stops_the_slurm_job_naming_it(cli, cluster, tmp_path):
    job_id, run_dir, info = submit(cli, tmp_path, ["hpct-good", "hpct-broken"])
    log = slurm_log(run_dir)
    assert info["JobState"] == "FAILED", log
    message = "module load hpct-broken failed (site 'lmodcluster' modules)"
    assert f"hpctrain: error: {message}" in log, log
    assert "hpct-broken/1.0: this module always" in log  # Lmod's own words stay visible
    failure = json.loads((run_dir / "status" / "failure.json").read_text())
    assert failure["reason"] == "setup" and message in failure["message"]
    assert not (run_dir / "results").exists()

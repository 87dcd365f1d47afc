"""Modules and setup lines under the job script's strict mode, with Debian's real Lmod (installed
on this machine as on the test cluster's nodes) and the test modulefiles of tests/cluster/."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from hpctrain.job.load import load_job
from hpctrain.job.plan import make_plan
from hpctrain.rendering.templates import render_part
from tests.conftest import ROOT, submitted

MODULES = ROOT / "tests" / "cluster" / "modulefiles"
PROGRAM = ROOT / "tests" / "programs" / "echo_rank.py"
LMOD_PROFILE = "/etc/profile.d/lmod.sh"  # dies under `set -u` without USER/LOGNAME


def site(tmp_path, **keys):
    doc = {"name": "lmodlocal", "scheduler": "local", "module_init": LMOD_PROFILE, **keys}
    path = tmp_path / "lmodlocal.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def job(tmp_path, **keys):
    doc = {"name": "setup", "script": str(PROGRAM), "python": sys.executable, **keys}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def env_without_user():
    # As a job submitted from cron, CI or a tool's shell: no USER, no LOGNAME.
    env = {k: v for k, v in os.environ.items() if k not in ("USER", "LOGNAME")}
    env["MODULEPATH"] = str(MODULES)
    return env


def run(cli, tmp_path, site_file, job_file):
    proc = cli("submit", job_file, "--site", site_file, "--wait", check=False,
               env=env_without_user(), timeout=180)
    _, run_dir = submitted(proc.stdout)
    return proc, run_dir


def test_modules_reading_unset_variables_load_and_reach_the_ranks(cli, tmp_path, monkeypatch):
    monkeypatch.delenv("USER", raising=False)
    monkeypatch.delenv("LOGNAME", raising=False)
    activate = tmp_path / "activate"  # like a venv's or conda's activation: reads unset names
    activate.write_text('export FAKE_ENV_ACTIVE="${FAKE_ENV_DISABLE_PROMPT}on"\n')
    tool_out = tmp_path / "tool.out"
    s = site(tmp_path, modules=["hpct-good", "hpct-unsetvar", "hpct-shellunset"],
             setup=[f"source {activate}"])
    j = job(tmp_path, setup=[f"hpct-good-tool >{tool_out}",
                             f'echo "[${{HPCT_NOT_SET_ANYWHERE}}]" >>{tool_out}'])
    proc, run_dir = run(cli, tmp_path, s, j)
    assert proc.returncode == 0, (proc.stdout, (run_dir / "logs" / "job.out").read_text())
    assert tool_out.read_text() == "hpct-good-tool\n[]\n"
    env = json.loads((run_dir / "results" / "rank-0.json").read_text())["env"]
    assert env["HPCT_GOOD"] == "1.0" and env["HPCT_UNSETVAR"] == "loaded"
    assert env["HPCT_SHELLUNSET"] == "1.0" and env["FAKE_ENV_ACTIVE"] == "on"


def test_strict_mode_is_restored_after_the_setup_lines(home, tmp_path):
    s = site(tmp_path, modules=["hpct-shellunset"], setup=["echo ${HPCT_NOT_SET_ANYWHERE}"])
    plan = make_plan(load_job({"name": "x", "script": "t.py"}, site=str(s)), str(tmp_path / "r"))
    script = ("set -euo pipefail\nRUN_DIR=" + str(tmp_path / "r") + "\n"
              + render_part(plan, "parts/functions.sh.j2")
              + render_part(plan, "parts/environment.sh.j2")
              + 'echo "options=$-"; shopt -qo pipefail && echo pipefail\n'
              + 'echo "${HPCT_SURELY_UNSET}"; echo "not reached"\n')
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                          env=env_without_user(), cwd=tmp_path)
    assert proc.returncode != 0 and "HPCT_SURELY_UNSET: unbound variable" in proc.stderr
    options = proc.stdout.split("options=")[1].split()[0]
    assert "e" in options and "u" in options and "pipefail" in proc.stdout
    assert "not reached" not in proc.stdout


@pytest.mark.parametrize("modules,setup,message", [
    (["hpct-good", "hpct-broken"], [], "module load hpct-broken failed (site 'lmodlocal' modules)"),
    (["hpct-tclunset"], [], "module load hpct-tclunset failed"),
    (["hpct-nonexistent"], [], "module load hpct-nonexistent failed"),
    (["hpct-good"], ["true", "echo a; false"], "setup line 2 failed: echo a; false (status 1)"),
])
def test_a_failing_module_or_line_stops_the_job_naming_it(cli, tmp_path, modules, setup, message):
    proc, run_dir = run(cli, tmp_path, site(tmp_path, modules=modules), job(tmp_path, setup=setup))
    log = (run_dir / "logs" / "job.out").read_text()
    assert proc.returncode != 0, log
    assert f"hpctrain: error: {message}" in log, log
    assert not (run_dir / "results").exists()  # nothing launched
    failure = json.loads((run_dir / "status" / "failure.json").read_text())
    assert failure["reason"] == "setup" and message in failure["message"], failure
    assert f"ended     setup: {message}" in cli("status", run_dir.name).stdout


def test_modules_without_a_module_command_name_module_init(cli, tmp_path):
    s = tmp_path / "nomod.yaml"
    s.write_text("name: nomod\nscheduler: local\nmodules: [hpct-good]\n")
    proc, run_dir = run(cli, tmp_path, s, job(tmp_path))
    log = (run_dir / "logs" / "job.out").read_text()
    assert proc.returncode != 0
    assert "'module' is not defined in the job's shell: set module_init in the site profile" in log

"""Executor parameters from a job and its site: pure mapping, no scheduler involved."""
from __future__ import annotations

import sys
import textwrap

import pytest

import hpctrain
from hpctrain.submission import prepare
from hpctrain.backends.submitit import local_parameters, slurm_parameters


@pytest.fixture
def gres_site(tmp_path, monkeypatch):
    (tmp_path / "gpusite.yaml").write_text(textwrap.dedent("""\
        name: gpusite
        scheduler: slurm
        gpu_request: gres
        gpu_type: a100
        modules: [cuda/12.4]
        setup: ["source /opt/env.sh"]
        sbatch_extra: ["--reservation=rl", "--requeue"]
        sbatch_skip: [mem]
        env: {NCCL_SOCKET_IFNAME: ib}
        """))
    monkeypatch.setenv("HPCTRAIN_SITE_PATH", str(tmp_path))
    return "gpusite"


def _params(job):
    plan = prepare(job, run_id="RUN_ID", for_function=True).plan
    return slurm_parameters(plan), plan


def test_function_is_one_task_per_rank(home, gres_site):
    job = hpctrain.load_job(name="f", site=gres_site, resources={
        "nodes": 3, "gpus_per_node": 4, "cpus_per_proc": 8, "time": "1-02:00:30", "mem": "200G",
        "account": "proj", "qos": "high", "partition": "gpu", "exclusive": True})
    p, _ = _params(job)
    assert p["nodes"] == 3 and p["ntasks_per_node"] == 4 and p["cpus_per_task"] == 8
    assert p["time"] == 26 * 60 + 1  # minutes, rounded up as Slurm does
    assert p["gres"] == "gpu:a100:4" and "gpus_per_node" not in p  # the site's GPU style
    assert (p["account"], p["qos"], p["partition"], p["exclusive"]) == ("proj", "high", "gpu", True)
    assert p["additional_parameters"] == {"reservation": "rl", "requeue": True}  # mem skipped
    assert p["srun_args"] == ["--kill-on-bad-exit=1"] and p["use_srun"] is True
    assert p["signal_delay_s"] == 120 and p["job_name"] == "f"


def test_gpus_per_node_style_and_mem(home):
    job = hpctrain.load_job(name="g", site="slurm-generic",
                            resources={"gpus_per_node": 2, "mem": "64G"})
    p, _ = _params(job)
    assert p["gpus_per_node"] == "2" and "gres" not in p
    assert p["additional_parameters"] == {"mem": "64G"}  # Slurm's string, not submitit's GB float


def test_submitit_accepts_the_parameters(home, gres_site):
    """submitit validates names and renders the sbatch text: the mapping must pass its check."""
    submitit = pytest.importorskip("submitit")
    from submitit.slurm.slurm import _make_sbatch_string
    job = hpctrain.load_job(name="f", site=gres_site, resources={"nodes": 2, "gpus_per_node": 2})
    p, _ = _params(job)
    text = _make_sbatch_string(command="python -m x", folder="/tmp/x", **p)
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2", "#SBATCH --gres=gpu:a100:2",
                 "#SBATCH --reservation=rl", "#SBATCH --requeue", "--kill-on-bad-exit=1"):
        assert line in text, text
    assert "--mem" not in text
    assert submitit


def test_local_parameters(home):
    job = hpctrain.load_job(name="l", site="local", resources={"procs_per_node": 2})
    plan = prepare(job, run_id="RUN_ID", for_function=True).plan
    p = local_parameters(job, plan)
    assert p["tasks_per_node"] == 2 and p["nodes"] == 1 and p["timeout_min"] == 60


def test_import_stays_cheap():
    import subprocess
    code = ("import sys, hpctrain; hpctrain.load_job; "
            "print(sorted(m for m in ('submitit', 'torch', 'cloudpickle') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_function_job_needs_no_script_but_command_does(home):
    job = hpctrain.load_job(name="f")
    assert job.warnings == ()
    with pytest.raises(hpctrain.HpctrainError, match="has no 'script'"):
        hpctrain.submit(job)
    with pytest.raises(hpctrain.HpctrainError, match="needs a callable"):
        hpctrain.submit_function("not a function", job)


def test_describe_callable_records_source(home):
    from hpctrain.backends.submitit import describe_callable  # noqa: F401 (below)
    info = describe_callable(test_local_parameters)
    assert info["module"] == __name__ and info["qualname"] == "test_local_parameters"
    assert info["source_file"] == __file__ and len(info["source_sha256"]) == 64

"""Rendering: deterministic bytes, quoting in one place, and every script passes shellcheck."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from hpctrain.api import prepare, render
from hpctrain.loading import load_job

BASE = {"name": "ddp-check", "library": "command", "script": "train.py",
        "args": ["--steps", "10"], "python": "python"}

SITES = {
    "ib-suffix.yaml": "name: ib-suffix\nscheduler: slurm\ngpu_request: gres\ngpu_type: a100\n"
                      "head: {mode: suffix, suffix: -ib}\nmodules: [cuda/12.4]\n"
                      "setup: ['source /opt/venv/bin/activate']\nsbatch_extra: ['--reservation=rl']\n"
                      "env: {NCCL_SOCKET_IFNAME: ib, NCCL_IB_HCA: mlx5}\n",
    "iface.yaml": "name: iface\nscheduler: slurm\nhead: {mode: interface, interface: ib0}\n"
                  "port: {fixed: 29555}\nsbatch_skip: [mem]\n",
}

# (site, extra job values): a matrix over launch shapes and site styles.
MATRIX = [
    ("local", {}),
    ("local", {"resources": {"procs_per_node": 2}}),
    ("localcluster", {"resources": {"nodes": 1}}),
    ("localcluster", {"resources": {"nodes": 2, "procs_per_node": 2}}),
    ("slurm-generic", {"resources": {"nodes": 4, "gpus_per_node": 8, "exclusive": True},
                       "secrets": ["WANDB_API_KEY"], "env": {"WANDB_PROJECT": "it's quoted"}}),
    ("ib-suffix.yaml", {"resources": {"nodes": 2, "gpus_per_node": 4, "mem": "64G"},
                        "python": "/opt/isaaclab/isaaclab.sh -p", "args": ["--task", "Isaac Cartpole; rm -rf /"]}),
    ("iface.yaml", {"resources": {"nodes": 3, "gpus_per_node": 2, "account": "rl", "qos": "high"},
                    "setup": ["ulimit -n 65536"]}),
    # The survive switches (hpctrain/survive.py): each one changes what the script holds.
    ("localcluster", {"resources": {"nodes": 2}, "preemption": {"enabled": False}}),
    ("localcluster", {"resources": {"nodes": 2}, "preemption": {"requeue": False, "signal": "TERM"}}),
    ("localcluster", {"resources": {"nodes": 2}, "launcher": {"preflight": False, "max_restarts": 2}}),
    ("localcluster", {"resources": {"nodes": 1}, "launcher": {"preflight": True, "max_restarts": 1}}),
    ("slurm-generic", {"resources": {"nodes": 2, "gpus_per_node": 4},
                       "launcher": {"preflight": True, "preflight_timeout": 30},
                       "preemption": {"signal": "USR1", "lead_time": 300, "grace": 200}}),
]
# Every RL library: Isaac Lab's train.py and an own script, one and several nodes, local and Slurm.
_ISAAC = {"script": None, "args": [], "task": "Isaac-Cartpole-v0", "isaaclab": "/opt/Isaac Lab"}
for _lib in ("rl_games", "rsl_rl", "skrl", "skrl_jax"):
    MATRIX += [
        ("local", {"library": _lib, "resources": {"procs_per_node": 2}}),
        ("localcluster", {"library": _lib, "resources": {"nodes": 2, "procs_per_node": 2}}),
        ("ib-suffix.yaml", {"library": _lib, "resources": {"nodes": 2, "gpus_per_node": 4}, **_ISAAC}),
        ("slurm-generic", {"library": _lib, "resources": {"nodes": 1, "gpus_per_node": 2},
                           "python": "$ISAACSIM_PYTHON_EXE", "seed": 3, **_ISAAC}),
    ]
MATRIX += [
    ("local", {"library": "di_engine", "script": None, "config": "cfg.py", "resources": {"procs_per_node": 2}}),
    ("localcluster", {"library": "di_engine", "script": None, "config": "cfg.py",
                      "resources": {"nodes": 2, "procs_per_node": 2}}),
]


@pytest.fixture
def site_dir(tmp_path, monkeypatch):
    for name, text in SITES.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def job_for(site, extra):
    data = dict(BASE)
    for k, v in extra.items():
        data[k] = v
    return load_job(data, site=site)


@pytest.mark.parametrize("site,extra", MATRIX)
def test_deterministic(site, extra, site_dir, home):
    assert render(job_for(site, extra)) == render(job_for(site, extra))


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="shellcheck is installed by scripts/install-system-deps.sh")
@pytest.mark.parametrize("site,extra", MATRIX)
def test_shellcheck_clean(site, extra, site_dir, home, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text(render(job_for(site, extra)))
    proc = subprocess.run(["shellcheck", "--severity=style", "--shell=bash", str(script)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


PACKAGED = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "hpctrain" / "site_configs").glob("*.yaml"))


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="shellcheck is installed by scripts/install-system-deps.sh")
@pytest.mark.parametrize("site,nodes", [(s, n) for s in PACKAGED for n in (1, 2)
                                        if not (s == "local" and n > 1)])  # local: one node by definition
def test_packaged_sites_render_clean(site, nodes, home, tmp_path):
    job = load_job(dict(BASE, resources={"nodes": nodes}), site=site)
    script = tmp_path / "job.sh"
    script.write_text(render(job))
    proc = subprocess.run(["shellcheck", "--severity=style", "--shell=bash", str(script)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_user_values_are_quoted(site_dir, home):
    text = render(job_for("ib-suffix.yaml", MATRIX[5][1]))
    assert "'Isaac Cartpole; rm -rf /'" in text
    assert "/opt/isaaclab/isaaclab.sh -p -m torch.distributed.run" in text
    assert "#SBATCH --gres=gpu:a100:4" in text and "--gres=gpu:a100:4 --kill-on-bad-exit=1" in text
    assert 'HEAD="${FIRST}"-ib' in text
    assert "#SBATCH --reservation=rl" in text and "module load cuda/12.4" in text


def test_secret_names_only(site_dir, home, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "s3cr3t-value")
    text = render(job_for("slurm-generic", MATRIX[4][1]))
    assert "WANDB_API_KEY" in text and "s3cr3t-value" not in text
    assert "export WANDB_PROJECT='it'\"'\"'s quoted'" in text


def test_multinode_launch_shape(site_dir, home):
    text = render(job_for("localcluster", {"resources": {"nodes": 2, "procs_per_node": 2}}))
    assert "srun --nodes=\"$NNODES\" --ntasks=\"$NNODES\" --ntasks-per-node=1" in text
    assert "--kill-on-bad-exit=1" in text
    assert '--rdzv-backend=c10d --rdzv-endpoint="$HEAD:$PORT" --rdzv-id="$SLURM_JOB_ID"' in text
    assert text.count("--rdzv-conf=\"") == 1 and "join_timeout=" in text and "last_call_timeout=" in text
    assert "--node-rank" not in text and "--node_rank" not in text  # inert with c10d, hangs at worst
    assert "PORT=$(( 61000 + 2 * (SLURM_JOB_ID % 2268) ))" in text  # above the ephemeral range
    assert "localhost" not in text.split("# --- rendezvous")[1].split("# --- launch")[0]
    assert "127.*) die" in text


def test_single_node_is_standalone(site_dir, home):
    text = render(job_for("localcluster", {"resources": {"nodes": 1, "procs_per_node": 2}}))
    assert "--standalone --nnodes=1 --nproc-per-node=2" in text and "--rdzv-endpoint" not in text


def test_interface_head_and_fixed_port(site_dir, home):
    text = render(job_for("iface.yaml", MATRIX[6][1]))
    assert "ip -o -4 addr show dev ib0" in text and "PORT=29555" in text
    assert "#SBATCH --mem" not in text  # skipped by the site


def test_dry_run_is_what_is_submitted(site_dir, home):
    job = job_for("localcluster", {"resources": {"nodes": 2}})
    prep = prepare(job, run_id="fixed")
    assert prep.submit_command == ["sbatch", "--parsable", str(prep.run_dir / "job.sbatch")]
    assert prep.script == prepare(job, run_id="fixed").script
    assert f"#SBATCH --output={prep.run_dir}/logs/slurm-%j.out" in prep.script


def test_torchrun_restarts_get_a_fresh_store_per_attempt(site_dir, home):
    # torch 2.13 keeps one agent store for the whole job; restarted ranks would read the dead
    # attempt's keys (hpctrain/survive.py, "torchrun's restarts").
    with_restarts = render(job_for("localcluster", {"resources": {"nodes": 2},
                                                    "launcher": {"max_restarts": 1}}))
    assert "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in with_restarts
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in render(job_for("localcluster", {
        "resources": {"nodes": 2}}))
    # The job's own choice wins.
    own = render(job_for("localcluster", {"resources": {"nodes": 2}, "launcher": {"max_restarts": 1},
                                          "env": {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"}}))
    assert "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=0" in own and "=1" not in own.split(
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE")[1][:3]


def test_rank_check_follows_preflight(site_dir, home):
    from hpctrain.plan import make_plan
    plan = make_plan(job_for("localcluster", {"resources": {"nodes": 2},
                                              "launcher": {"preflight_timeout": 25}}), "/runs/x")
    assert plan.bootstrap["rank_check_timeout"] == 25
    off = make_plan(job_for("localcluster", {"resources": {"nodes": 2},
                                             "launcher": {"preflight": False}}), "/runs/x")
    assert off.bootstrap["rank_check_timeout"] is None
    single = make_plan(job_for("localcluster", {"resources": {"nodes": 1}}), "/runs/x")
    assert single.bootstrap["rank_check_timeout"] is None  # preflight is off by default on 1 node


def test_stale_rank_identity_from_the_submitting_shell_is_cleared(site_dir, home):
    text = render(job_for("localcluster", {"resources": {"nodes": 2}}))
    env_part = text.split("# --- environment")[1]
    unset = env_part.split("\ncd ")[0]
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "JAX_WORLD_SIZE", "JAX_COORDINATOR_ADDR",
                 "HPCTRAIN_SEED", "HPCTRAIN_RESUME_FROM"):
        assert f" {name} " in unset.replace("\\\n", " ") + " ", name

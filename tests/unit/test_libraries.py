"""Library adapters: the rendered launch equals Isaac Lab's documented multi-GPU commands (only
the Slurm-filled parts differ), and the libraries' traps are caught at validation."""
from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from hpctrain.submission import render
from hpctrain.errors import HpctrainError
from hpctrain.job.load import load_job
from hpctrain.job.plan import make_plan
from tests.conftest import ROOT

ISAACLAB = "/opt/IsaacLab"
TASK_ARGS = ["--task=Isaac-Cartpole-v0", "--headless", "--distributed"]
# Isaac Lab's docs/source/features/multi_gpu.rst (examples/rl/NOTES.md quotes them).
DOC_1 = ("python -m torch.distributed.run --nnodes=1 --nproc_per_node=2 "
         "scripts/reinforcement_learning/{lib}/train.py --task=Isaac-Cartpole-v0 --headless --distributed")
DOC_2 = ("python -m torch.distributed.run --nproc_per_node=2 --nnodes=2 --node_rank=0 "
         "--master_addr=<ip_of_master> --master_port=5555 scripts/reinforcement_learning/{lib}/train.py "
         "--task=Isaac-Cartpole-v0 --headless --distributed")
DOC_JAX_1 = ("python -m skrl.utils.distributed.jax --nnodes=1 --nproc_per_node=2 "
             "scripts/reinforcement_learning/skrl/train.py --task=Isaac-Cartpole-v0 --headless "
             "--distributed --ml_framework jax")
DOC_JAX_2 = ("python -m skrl.utils.distributed.jax --nproc_per_node=2 --nnodes=2 --node_rank=0 "
             "--coordinator_address=ip_of_master_machine:5555 scripts/reinforcement_learning/skrl/"
             "train.py --task=Isaac-Cartpole-v0 --headless --distributed --ml_framework jax")
# Filled from Slurm by hpctrain (c10d rendezvous instead of a fixed master; node rank left to it).
SLURM_FILLED = {"master_addr", "master_port", "node_rank", "rdzv_backend", "rdzv_endpoint",
                "rdzv_id", "rdzv_conf", "standalone", "max_restarts", "coordinator_address"}


def isaac_job(lib, nodes, site="slurm-generic", **extra):
    return load_job({"name": "cartpole", "library": lib, "task": "Isaac-Cartpole-v0",
                     "isaaclab": ISAACLAB, "resources": {"nodes": nodes, "gpus_per_node": 2},
                     **extra}, site=site)


def launch_argv(script: str) -> list[str]:
    body = script.split("LAUNCH=(", 1)[1].split(")\n", 1)[0]
    return shlex.split(body.replace("\\\n", " "))


def split_launcher(argv: list[str], module: str):
    """(launcher options {name: value}, program argv) for `… -m module OPTS program ARGS`."""
    i = argv.index(module) + 1
    opts = {}
    while argv[i].startswith("--"):
        key, _, value = argv[i][2:].partition("=")
        opts[key.replace("-", "_")] = value
        i += 1
    return opts, argv[i:]


def program_of(job) -> list[str]:
    """What the bootstrap runs (bootstrap.json's program), with the checkout's path cut off."""
    prog = make_plan(job, "/r").bootstrap["program"]
    assert prog[0].startswith(ISAACLAB + "/")
    return [prog[0][len(ISAACLAB) + 1:], *prog[1:]]


def rank_side(argv: list[str]) -> list[str]:
    """The launch ends by starting the run's rank side on its bootstrap.json."""
    assert argv[-3:] == ["$RUN_DIR/rank", "run", "$RUN_DIR/bootstrap.json"], argv
    return argv[:-3]


def doc_parts(doc: str, module: str):
    argv = shlex.split(doc)
    opts, prog = split_launcher(argv, module)
    return opts, prog


@pytest.mark.parametrize("lib", ["rl_games", "rsl_rl", "skrl"])
@pytest.mark.parametrize("nodes,doc", [(1, DOC_1), (2, DOC_2)])
def test_torch_launch_is_isaaclabs_documented_command(lib, nodes, doc, home):
    job = isaac_job(lib, nodes)
    argv = launch_argv(render(job))
    rank_side(argv)
    # torchrun's main runs inside hpctrain's rank side (which starts the node's sampler) with
    # torchrun's own arguments: after the node check on several nodes (rank/preflight.launch),
    # as the agent on one (rank/preflight.agent).
    start = argv.index("$RUN_DIR/rank")
    if nodes > 1:
        assert argv[start:start + 3] == ["$RUN_DIR/rank", "launch", "60"]
        opts, _ = split_launcher(argv[start + 2:], "60")
    else:
        assert argv[start:start + 2] == ["$RUN_DIR/rank", "agent"]
        opts, _ = split_launcher(argv[start:], "agent")
    doc_opts, doc_prog = doc_parts(doc.format(lib=lib), "torch.distributed.run")
    assert program_of(job) == doc_prog  # argument by argument
    assert argv[start - 2:start] == [f"{ISAACLAB}/isaaclab.sh", "-p"]
    for key in set(opts) | set(doc_opts):
        if key in SLURM_FILLED:
            continue
        want = "$NNODES" if (key == "nnodes" and nodes > 1) else doc_opts[key]
        assert opts.get(key) == want, key
    if nodes > 1:
        assert opts["rdzv_endpoint"] == "$HEAD:$PORT" and opts["rdzv_backend"] == "c10d"
        assert "node_rank" not in opts
    else:
        assert "standalone" in opts


@pytest.mark.parametrize("nodes,doc", [(1, DOC_JAX_1), (2, DOC_JAX_2)])
def test_jax_launch_is_skrls_launcher_equivalent(nodes, doc, home):
    job = isaac_job("skrl_jax", nodes)
    text = render(job)
    argv = launch_argv(text)
    rank_side(argv)
    doc_opts, doc_prog = doc_parts(doc, "skrl.utils.distributed.jax")
    assert program_of(job) == doc_prog
    srun = {a[2:].split("=")[0]: a.split("=", 1)[1] for a in argv[:argv.index(f"{ISAACLAB}/isaaclab.sh")]
            if a.startswith("--") and "=" in a}
    # skrl's --nnodes / --nproc_per_node are srun's node count and tasks per node.
    assert srun["nodes"] == "$NNODES" and f"\nNNODES={nodes}\n" in text
    assert srun["ntasks-per-node"] == doc_opts["nproc_per_node"]
    assert srun["distribution"] == "block"  # rank 0 (the coordinator) on the first node
    # --coordinator_address=HOST:PORT is the bootstrap's JAX_COORDINATOR_ADDR/PORT, from Slurm.
    rank_env = make_plan(job, "/r").bootstrap["rank_env"]
    assert rank_env == {"JAX_RANK": "{rank}", "JAX_LOCAL_RANK": "{local_rank}",
                        "JAX_WORLD_SIZE": "{world_size}", "JAX_COORDINATOR_ADDR": "{head}",
                        "JAX_COORDINATOR_PORT": "{spare_port}"}
    assert "export HPCTRAIN_PORT=$PORT HPCTRAIN_SPARE_PORT=$(( PORT + 1 ))" in text


def test_own_script_gets_only_its_args(home):
    job = load_job({"name": "p", "library": "rsl_rl", "script": "examples/rl/rsl_rl_pendulum.py",
                    "args": ["--updates", 3], "task": "Isaac-Cartpole-v0"})
    assert make_plan(job, "/r").program == ["examples/rl/rsl_rl_pendulum.py", "--updates", "3"]
    assert any("only to Isaac Lab's training" in w for w in job.warnings)


def test_isaaclab_seed_and_python_from_environment(home):
    job = isaac_job("rl_games", 1, seed=7, python="$ISAACSIM_PYTHON_EXE")
    text = render(job)
    assert '"${ISAACSIM_PYTHON_EXE}" "$RUN_DIR/rank" agent' in text
    assert make_plan(job, "/r").program[-1] == "--seed=7"


def test_isaaclab_mode_needs_task_and_checkout(home):
    with pytest.raises(HpctrainError, match="needs a task"):
        load_job({"name": "x", "library": "skrl", "isaaclab": ISAACLAB})
    with pytest.raises(HpctrainError, match="where Isaac Lab is") as e:
        load_job({"name": "x", "library": "skrl", "task": "Isaac-Cartpole-v0"})
    assert "isaaclab:" in e.value.fix


def test_rl_games_standard_schedule_warns_on_several_ranks(home):
    bad = ["agent.params.config.schedule_type=standard"]
    job = isaac_job("rl_games", 1, args=bad)
    assert any("schedule_type=standard" in w and "legacy" in w for w in job.warnings)
    fixed = isaac_job("rl_games", 1, args=bad + ["agent.params.config.lr_schedule=linear"])
    assert not any("schedule_type" in w for w in fixed.warnings)
    single = isaac_job("rl_games", 1, args=bad, resources={"gpus_per_node": 1})
    assert not any("schedule_type" in w for w in single.warnings)


@pytest.mark.parametrize("lib", ["rl_games", "rsl_rl", "skrl", "di_engine"])
def test_per_rank_gpu_masks_are_errors_for_torch_libraries(lib, home, tmp_path):
    extra = {"config": "c.py"} if lib == "di_engine" else {}
    job_file = tmp_path / "job.yaml"
    job_file.write_text(f"name: x\nlibrary: {lib}\nscript: t.py\nresources: {{nodes: 2, gpus_per_node: 2}}\n"
                        "env:\n  CUDA_VISIBLE_DEVICES: $SLURM_LOCALID\n")
    with pytest.raises(HpctrainError, match="invalid device ordinal") as e:
        load_job(str(job_file), site="slurm-generic")
    assert e.value.where == f"{job_file}:6" and e.value.fix  # file:line of the key
    with pytest.raises(HpctrainError, match="invalid device ordinal"):
        isaac_job(lib, 1, env={"CUDA_VISIBLE_DEVICES": "0"}, **extra)
    site = tmp_path / "pertask.yaml"
    site.write_text("name: pertask\nscheduler: slurm\nsbatch_extra: ['--gpus-per-task=1']\n")
    with pytest.raises(HpctrainError, match="--gpus-per-task") as e:
        isaac_job(lib, 2, site=str(site), **extra)
    assert "sbatch_extra" in e.value.fix
    isaac_job(lib, 1, env={"CUDA_VISIBLE_DEVICES": "0,1"}, **extra)  # all the node's GPUs: fine


def test_rsl_rl_isaaclab_multinode_seed_warning(home):
    assert any("seed + LOCAL_RANK" in w and "HPCTRAIN_SEED" in w
               for w in isaac_job("rsl_rl", 2).warnings)
    assert not any("LOCAL_RANK" in w for w in isaac_job("rsl_rl", 1).warnings)


def test_di_engine_launch(home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg.py").write_text("policy = dict(multi_gpu=False)\n")
    job = load_job({"name": "d", "library": "di_engine", "config": "cfg.py",
                    "resources": {"procs_per_node": 2}})
    assert any("multi_gpu=True" in w for w in job.warnings)
    argv = launch_argv(render(job))
    # torchrun's agent through the rank side (rank/end/ending.py: a signal ends it without a
    # traceback), with DI-engine's own process count.
    assert argv[1:3] == ["$RUN_DIR/rank", "agent"] and "--nproc-per-node=2" in argv
    boot = make_plan(job, "/r").bootstrap
    assert boot["program"] == ["cfg.py"]
    assert boot["unset_env"] == ["SLURM_LOCALID", "SLURM_NTASKS"] and boot["chdir_run_dir"]


def test_resume_data_per_library(home):
    from hpctrain.libraries import adapter
    own = load_job({"name": "x", "library": "rsl_rl", "script": "t.py"}).spec
    isaac = isaac_job("rsl_rl", 1).spec
    a = adapter("rsl_rl")
    assert (a.checkpoint_patterns(own), a.resume_args(own)) == (["checkpoints/model_*.pt"],
                                                                ["--checkpoint", "{checkpoint}"])
    assert a.checkpoint_patterns(isaac) == ["logs/rsl_rl/*/*/model_*.pt"]
    assert a.resume_args(isaac) == ["--resume", "--load_run", "{dirname_re}", "--checkpoint",
                                  "{name_re}"]
    for lib in ("rl_games", "skrl", "skrl_jax"):
        assert adapter(lib).resume_args(isaac_job(lib, 1).spec) == ["--checkpoint", "{checkpoint}"]


HEAVY = {"torch", "jax", "gymnasium", "rl_games", "skrl", "rsl_rl", "ding", "numpy", "flax",
         "matplotlib", "tensorboard", "tbparse", "pandas"}


def imported_by(*args: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "hpctrain", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    assert "hpctrain" in imported  # the measurement saw our own imports
    return imported


def test_render_imports_no_heavy_library(home):
    imported = imported_by("render", "examples/rl/skrl_jax_pendulum.yaml", "--site", "localcluster")
    assert not imported & HEAVY, imported & HEAVY


def test_submit_and_status_import_no_heavy_library(home, tmp_path):
    """The plotting and TensorBoard extras stay off the submit and status paths, progress
    included: a run's status reads its progress files with the standard library."""
    imported = imported_by("submit", "examples/cartpole_ppo.yaml", "--dry-run")
    imported |= imported_by("status")
    assert not imported & HEAVY, imported & HEAVY

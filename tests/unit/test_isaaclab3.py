"""Isaac Lab 3.0 beside 2.x: the release read from the install (never imported here), each
generation's command, resume and CPU shims, and a 2.x habit on 3.0 as one error line.

The installs here are trees shaped like the real ones (a pip/uv venv's dist-info and task
packages, a checkout's VERSION and isaaclab.sh); tests/local/test_isaaclab_local.py and
tests/slurm/test_isaaclab_cluster.py train the real 3.0 install.
"""
from __future__ import annotations

import os
import sys
import types

import pytest

from hpctrain.errors import HpctrainError
from hpctrain.job.isaaclab import find_install
from hpctrain.job.load import load_job
from hpctrain.job.plan import make_plan
from hpctrain.rank.before import bootstrap, cpu_shims

CARTPOLE_INIT = '''import gymnasium as gym
gym.register(
    id="Isaac-Cartpole",
    entry_point="isaaclab.envs:ManagerBasedRLEnv",
    kwargs={"rsl_rl_cfg_entry_point": "x"},
)
gym.register(id="Isaac-Cartpole-Direct", entry_point="x")
'''


def make_venv(root, version="3.0.0", tasks=CARTPOLE_INIT, external=False):
    sp = root / "lib" / "python3.12" / "site-packages"
    (sp / f"isaaclab-{version}.dist-info").mkdir(parents=True)
    (root / "bin").mkdir()
    python = root / "bin" / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    pkg = sp / "isaaclab_tasks" / "core" / "cartpole"
    pkg.mkdir(parents=True)
    (sp / "isaaclab_tasks" / "__init__.py").write_text("")
    (sp / "isaaclab_tasks" / "core" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text(tasks)
    if external:
        ep = sp / "my_robot_tasks-0.1.dist-info"
        ep.mkdir()
        (ep / "entry_points.txt").write_text("[isaaclab.tasks]\nmy_robot = my_robot.tasks\n")
    return root


def make_checkout(root, version):
    root.mkdir()
    (root / "isaaclab.sh").write_text("#!/bin/bash\n")
    (root / "VERSION").write_text(version + "\n")
    pkg = root / "source" / "isaaclab_tasks" / "isaaclab_tasks" / "classic" / "cartpole"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('gym.register(\n    id="Isaac-Cartpole-v0",\n)\n')
    return root


def job(install, lib="rsl_rl", task="Isaac-Cartpole", **extra):
    return load_job({"name": "cartpole", "library": lib, "task": task, "isaaclab": str(install),
                     "resources": {"nodes": 2, "gpus_per_node": 2}, **extra}, site="slurm-generic")


def test_release_and_interpreter_read_from_a_venv(tmp_path, home):
    venv = make_venv(tmp_path / "venv")
    found = find_install(str(venv))
    assert (found.kind, found.version, found.generation) == ("environment", "3.0.0", 3)
    assert found.python == [str(venv / "bin" / "python")]
    assert found.tasks == {"Isaac-Cartpole", "Isaac-Cartpole-Direct"}
    # The venv's interpreter names the same install.
    assert find_install(str(venv / "bin" / "python")).version == "3.0.0"
    j = job(venv)
    assert j.spec.isaaclab_version == "3.0.0" and j.spec.python == str(venv / "bin" / "python")


def test_release_read_from_a_checkout(tmp_path):
    assert find_install(str(make_checkout(tmp_path / "a", "2.3.2"))).generation == 2
    c = find_install(str(make_checkout(tmp_path / "b", "3.0.0")))
    assert (c.kind, c.version, c.python[1]) == ("checkout", "3.0.0", "-p")
    assert c.python[0].endswith("/b/isaaclab.sh")
    assert find_install(str(tmp_path / "nothing")) is None


def test_3_command_is_the_one_cli_under_torchrun(tmp_path, home):
    venv = make_venv(tmp_path / "venv")
    for lib, expect in (("rsl_rl", ["--rl_library", "rsl_rl"]),
                        ("rl_games", ["--rl_library", "rl_games"]),
                        ("skrl", ["--rl_library", "skrl"]),
                        ("skrl_jax", ["--rl_library", "skrl"])):
        p = make_plan(job(venv, lib, seed=7, args=["--num_envs", "64", "agent.algorithm.learning_rate=0.001"]), "/r")
        assert p.program[:5] == ["-m", "isaaclab", "train", *expect]
        assert "--headless" not in p.program and "--distributed" in p.program
        assert "--run_timestamp=hpctrain" in p.program and "--seed=7" in p.program
        # Hydra overrides and the user's arguments byte-exact, last.
        assert p.program[-3:] == ["--num_envs", "64", "agent.algorithm.learning_rate=0.001"]
        assert p.python == [str(venv / "bin" / "python")]
        assert p.bootstrap["resume_args"] == ["--checkpoint", "{checkpoint}"]
        assert "isaaclab" in p.bootstrap["cpu_shims"]
    jax = make_plan(job(venv, "skrl_jax"), "/r").program
    assert jax[jax.index("--ml_framework") + 1] == "jax"
    # The user's own run folder name wins.
    own = make_plan(job(venv, args=["--run_timestamp=mine"]), "/r").program
    assert own.count("--run_timestamp=mine") == 1 and "--run_timestamp=hpctrain" not in own


def test_2x_command_unchanged(tmp_path, home):
    checkout = make_checkout(tmp_path / "IsaacLab", "2.3.2")
    p = make_plan(job(checkout, task="Isaac-Cartpole-v0"), "/r")
    assert p.program[0] == str(checkout / "scripts/reinforcement_learning/rsl_rl/train.py")
    assert p.program[1:4] == ["--task=Isaac-Cartpole-v0", "--headless", "--distributed"]
    assert p.python == [str(checkout / "isaaclab.sh"), "-p"]
    assert p.bootstrap["resume_args"][:2] == ["--resume", "--load_run"]
    assert "isaaclab" not in p.bootstrap["cpu_shims"]


@pytest.mark.parametrize("arg, fix", [("--headless", "headless by default"),
                                      ("--resume", "--checkpoint"),
                                      ("--load_run=2026-01-01", "--checkpoint")])
def test_2x_flags_on_3_are_one_error(tmp_path, home, arg, fix):
    venv = make_venv(tmp_path / "venv")
    path = tmp_path / "job.yaml"
    path.write_text(f"name: cartpole\nlibrary: rsl_rl\ntask: Isaac-Cartpole\nisaaclab: {venv}\n"
                    f"args:\n  - --num_envs\n  - 64\n  - {arg}\n")
    with pytest.raises(HpctrainError) as e:
        load_job(path, site="slurm-generic")
    assert "2.x train.py flag" in e.value.what and fix in e.value.fix
    assert e.value.where == f"{path}:8"  # the argument's own line


def test_2x_script_on_3_is_an_error(tmp_path, home):
    venv = make_venv(tmp_path / "venv")
    with pytest.raises(HpctrainError) as e:
        job(venv, script="/opt/IsaacLab/scripts/reinforcement_learning/rsl_rl/train.py")
    assert "no scripts/ folder" in e.value.what


def test_task_of_another_release_names_the_right_one(tmp_path, home):
    venv = make_venv(tmp_path / "venv")
    with pytest.raises(HpctrainError) as e:
        job(venv, task="Isaac-Cartpole-v0")
    assert "not registered by Isaac Lab 3.0.0" in e.value.what
    assert e.value.fix == "did you mean Isaac-Cartpole?"
    # Tasks another installed package registers cannot be read without importing it: a warning.
    other = make_venv(tmp_path / "other", external=True)
    j = job(other, task="MyRobot-Walk")
    assert any("not registered" in w for w in j.warnings)


def test_unreadable_install_release_from_key_or_image_tag(home):
    j = job("/nowhere/isaaclab", isaaclab_version="3.0.0")
    p = make_plan(j, "/r")
    assert p.program[:3] == ["-m", "isaaclab", "train"]
    assert p.python == ["/nowhere/isaaclab/bin/python"]
    assert not any("could be read" in w for w in j.warnings)
    plain = job("/nowhere/isaaclab", task="Isaac-Cartpole-v0")
    assert any("set isaaclab_version: 3.0.0" in w for w in plain.warnings)
    assert make_plan(plain, "/r").program[2] == "--headless"
    image = load_job({"name": "c", "library": "rsl_rl", "task": "Isaac-Cartpole",
                      "isaaclab": "/workspace/isaaclab", "python": "python3",
                      "resources": {"nodes": 2, "gpus_per_node": 4},
                      "container": {"runtime": "apptainer",
                                    "image": "docker://nvcr.io/nvidia/isaac-lab:3.0.0-kitless"}},
                     site="containers.yaml" if os.path.exists("containers.yaml") else "slurm-generic")
    assert image.spec.isaaclab_version == "3.0.0"


def test_release_mismatch_is_an_error(tmp_path, home):
    venv = make_venv(tmp_path / "venv")
    with pytest.raises(HpctrainError) as e:
        job(venv, isaaclab_version="2.3.2")
    assert "is release 3.0.0" in e.value.what


def test_asset_root_reaches_every_rank(tmp_path, home):
    venv = make_venv(tmp_path / "venv")
    p = make_plan(job(venv, isaaclab_assets="/shared/isaac-assets"), "/r")
    assert p.env["ISAACSIM_ASSET_ROOT"] == "/shared/isaac-assets"


def test_resume_is_the_exact_checkpoint_file():
    ckpt = "/runs/x/logs/rsl_rl/cartpole/hpctrain/model_49.pt"
    argv = ["-m", "isaaclab", "train", "--rl_library", "rsl_rl", "--task=Isaac-Cartpole"]
    assert bootstrap.resume_argv(argv, ["--checkpoint", "{checkpoint}"], ckpt) == [*argv, "--checkpoint", ckpt]
    # A fine-tuning start's --checkpoint is replaced by the run's own newest one.
    given = [*argv, "--checkpoint", "/pretrained/model.pt"]
    assert bootstrap.resume_argv(given, ["--checkpoint", "{checkpoint}"], ckpt) == [*argv, "--checkpoint", ckpt]


def test_isaaclab_cpu_shims_only_without_cuda(monkeypatch):
    calls = []
    launcher = types.SimpleNamespace(_resolve_distributed_device=lambda cfg, args: calls.append("orig"))
    common = types.SimpleNamespace(validate_distributed_device=lambda a: calls.append("refused"))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(
        cuda=types.SimpleNamespace(is_available=lambda: False)))
    cpu_shims._patch_isaaclab_launcher(launcher)
    cpu_shims._patch_isaaclab_entrypoints(common)
    cfg = types.SimpleNamespace(sim=types.SimpleNamespace(device="cuda:0"))
    args = {"distributed": True, "device": "cpu"}
    launcher._resolve_distributed_device(cfg, args)
    assert cfg.sim.device == "cpu" and args["device"] == "cpu" and calls == []
    common.validate_distributed_device(types.SimpleNamespace(distributed=True, device="cpu"))
    assert calls == []
    launcher._resolve_distributed_device(cfg, {"distributed": False})
    assert calls == ["orig"]
    # With a GPU the originals run untouched.
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(
        cuda=types.SimpleNamespace(is_available=lambda: True)))
    launcher._resolve_distributed_device(cfg, args)
    common.validate_distributed_device(None)
    assert calls == ["orig", "orig", "refused"]


def test_a_missing_isaac_asset_is_explained():
    from hpctrain.rank.end.causes import explain
    local = FileNotFoundError("Unable to resolve the file: /shared/a/Isaac/IsaacLab/Robots/x.usd")
    assert explain(local).startswith("Isaac Lab could not load the asset /shared/a/Isaac/IsaacLab/"
                                     "Robots/x.usd from the asset root (ISAACSIM_ASSET_ROOT): set "
                                     "isaaclab_assets")
    url = FileNotFoundError("Unable to find the file: https://host/Assets/Isaac/6.2/Isaac/IsaacLab/g.usda")
    assert "its public asset server, which this node cannot reach" in explain(url)
    assert explain(FileNotFoundError("nope")) == "FileNotFoundError: nope"
    assert explain(ValueError("Unable to find the file: /Isaac/x")) == "ValueError: Unable to find the file: /Isaac/x"


def test_an_interpreter_is_read_never_run(tmp_path):
    """A job file is untrusted: the interpreter it names is looked at, not started."""
    prefix = tmp_path / "usr"
    (prefix / "lib" / "python3.12" / "dist-packages" / "isaaclab-3.0.0.dist-info").mkdir(parents=True)
    (prefix / "bin").mkdir()
    marker = tmp_path / "ran"
    python = prefix / "bin" / "python3.12"
    python.write_text(f"#!/bin/sh\ntouch {marker}\n")
    python.chmod(0o755)
    found = find_install(str(python))
    assert (found.kind, found.version, found.python) == ("interpreter", "3.0.0", [str(python)])
    assert not marker.exists()

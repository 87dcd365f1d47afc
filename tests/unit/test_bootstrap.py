"""The per-rank bootstrap and the CPU shims, with fake torch modules (no GPU needed)."""
from __future__ import annotations

import os
import sys
import types

import pytest

from hpctrain import bootstrap, cpu_mode


def fake_torch(cuda: bool, count: int = 0):
    calls = []
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_available=lambda: cuda, device_count=lambda: count,
                                       set_device=lambda i: calls.append(i))
    dist = types.SimpleNamespace(is_available=lambda: True, init_process_group=lambda *a, **k: None)
    torch.distributed = dist
    return torch, calls


@pytest.fixture
def torch_module(monkeypatch):
    def install(cuda, count=0):
        torch, calls = fake_torch(cuda, count)
        monkeypatch.setitem(sys.modules, "torch", torch)
        return torch, calls
    return install


ME = {"rank": 5, "local_rank": 1, "world_size": 8, "local_world_size": 4, "node": "n2"}


def test_pin_device_local_rank(torch_module, capsys):
    _, calls = torch_module(cuda=True, count=4)
    bootstrap.pin_device(ME)
    assert calls == [1]


def test_pin_device_falls_back_to_cuda0_with_a_warning(torch_module, capsys):
    _, calls = torch_module(cuda=True, count=1)
    bootstrap.pin_device(ME)
    assert calls == [0]
    assert "only 1 GPU(s) are visible" in capsys.readouterr().err


def test_pin_device_waits_for_torch_import(monkeypatch, tmp_path):
    real = sys.modules.pop("torch", None)
    try:
        _fake_torch_import(monkeypatch, tmp_path)
    finally:  # never leave the fake behind for later tests
        sys.modules.pop("torch", None)
        if real is not None:
            sys.modules["torch"] = real


def _fake_torch_import(monkeypatch, tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        "import types\ncalls = []\n"
        "cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 4,"
        " set_device=calls.append)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    bootstrap.pin_device(ME)
    import torch  # the hook runs right after this import
    assert torch.calls == [1] and torch.__file__.startswith(str(tmp_path))


def test_cpu_shims_touch_nothing_when_a_gpu_is_present(torch_module):
    torch, _ = torch_module(cuda=True, count=2)
    before = (torch.distributed.init_process_group, torch.cuda.set_device)
    assert cpu_mode.install("rsl_rl", after_import=bootstrap.after_import) == []
    cpu_mode._patch_torch(torch)  # even if a hook fires, CUDA present -> left alone
    assert (torch.distributed.init_process_group, torch.cuda.set_device) == before


def test_cpu_shims_patch_without_gpu(torch_module):
    torch, _ = torch_module(cuda=False)
    seen = []
    torch.distributed.init_process_group = lambda *a, **k: seen.append((a, k))
    cpu_mode._patch_torch(torch)
    torch.distributed.init_process_group("nccl", rank=0)
    torch.distributed.init_process_group(backend="cpu:gloo,cuda:nccl", device_id=3)
    assert seen == [(("gloo",), {"rank": 0}), ((), {"backend": "gloo"})]
    assert torch.cuda.set_device(1) is None


def test_cpu_mode_uses_the_bootstraps_hook():
    assert cpu_mode._default_after_import() is bootstrap.after_import
    assert not hasattr(cpu_mode, "_PostImportFinder")


@pytest.mark.parametrize("env,expected", [({"SLURM_CPUS_ON_NODE": "16"}, "4"),
                                          ({"SLURM_CPUS_ON_NODE": "2"}, "1")])
def test_threads_are_node_cpus_over_local_ranks(env, expected, monkeypatch):
    for k in ("OMP_NUM_THREADS", "SLURM_CPUS_ON_NODE", "HPCTRAIN_SEED"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    bootstrap.set_environment({"seed": 10}, ME)
    assert os.environ["OMP_NUM_THREADS"] == expected and os.environ["MKL_NUM_THREADS"] == expected
    assert os.environ["HPCTRAIN_SEED"] == "15"  # seed + global rank


def test_threads_from_affinity_and_job_wins(monkeypatch):
    monkeypatch.delenv("SLURM_CPUS_ON_NODE", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    bootstrap.set_environment({}, ME)
    assert os.environ["OMP_NUM_THREADS"] == "2"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    bootstrap.set_environment({"threads_from_env": True}, ME)
    assert os.environ["OMP_NUM_THREADS"] == "3"


def test_rank_env_and_unset(monkeypatch):
    monkeypatch.setenv("HPCTRAIN_HEAD", "node7")
    monkeypatch.setenv("HPCTRAIN_SPARE_PORT", "61235")
    monkeypatch.setenv("SLURM_LOCALID", "0")
    from hpctrain.libraries import adapter
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    bootstrap.set_environment({"rank_env": adapter("skrl_jax").rank_env,
                               "unset_env": list(adapter("di_engine").unset_env)}, ME)
    env = os.environ
    assert (env["JAX_RANK"], env["JAX_LOCAL_RANK"], env["JAX_WORLD_SIZE"]) == ("5", "1", "8")
    assert (env["JAX_COORDINATOR_ADDR"], env["JAX_COORDINATOR_PORT"]) == ("node7", "61235")
    assert "SLURM_LOCALID" not in env
    for k in ("JAX_RANK", "JAX_LOCAL_RANK", "JAX_WORLD_SIZE", "JAX_COORDINATOR_ADDR", "JAX_COORDINATOR_PORT"):
        monkeypatch.delenv(k)


def test_identity_from_slurm_tasks(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    for k, v in {"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NTASKS": "4",
                 "SLURM_NTASKS_PER_NODE": "2(x2)", "SLURMD_NODENAME": "node2"}.items():
        monkeypatch.setenv(k, v)
    me = bootstrap.identity({"launcher": "tasks"})
    assert me == {"rank": 3, "local_rank": 1, "world_size": 4, "local_world_size": 2, "node": "node2"}


def test_site_env_applied_but_job_env_wins(monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    bootstrap.apply_site_env({"env": {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_DEBUG": "WARN"}})
    assert os.environ["NCCL_SOCKET_IFNAME"] == "ib0" and os.environ["NCCL_DEBUG"] == "INFO"
    monkeypatch.delenv("NCCL_SOCKET_IFNAME")


def test_site_env_is_set_before_the_program_imports_anything(tmp_path, monkeypatch):
    import json
    import subprocess
    (tmp_path / "cfg.json").write_text(json.dumps({"env": {"NCCL_IB_HCA": "mlx5"}, "cpu_mode": "off"}))
    # A module that records the variable at its own import time, imported by the program.
    (tmp_path / "lib_probe.py").write_text("import os\nSEEN = os.environ.get('NCCL_IB_HCA')\n")
    (tmp_path / "prog.py").write_text("import sys, lib_probe\nsys.exit(0 if lib_probe.SEEN == 'mlx5' else 7)\n")
    env = {k: v for k, v in os.environ.items() if k != "NCCL_IB_HCA"}
    env["HPCTRAIN_RUN_DIR"] = str(tmp_path)
    proc = subprocess.run([sys.executable, bootstrap.__file__, str(tmp_path / "cfg.json"), "--",
                           str(tmp_path / "prog.py")], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (tmp_path / "prog.py").write_text("import sys\nsys.exit(9)\n")
    proc = subprocess.run([sys.executable, bootstrap.__file__, str(tmp_path / "cfg.json"), "--",
                           str(tmp_path / "prog.py")], env=env, capture_output=True, text=True)
    assert proc.returncode == 9  # the program's status is the rank's
    assert "exited 9" in (tmp_path / "status" / "rank-0.failed").read_text()

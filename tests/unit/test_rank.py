"""The rank side (hpctrain/rank/): the bootstrap, the CPU shims and the records, with fake torch
modules (no GPU needed), and the run directory's copy run by path as the job runs it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from hpctrain.rank.before import bootstrap, cpu_shims

from hpctrain.rank.during import hooks
from hpctrain.rank.records import RankConfig, RankIdentity, read_rank_failures


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


ME = RankIdentity(rank=5, local_rank=1, world_size=8, local_world_size=4, node="n2")


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
    assert cpu_shims.install(["torch", "rsl_rl"]) == []
    cpu_shims._patch_torch(torch)  # even if a hook fires, CUDA present -> left alone
    assert (torch.distributed.init_process_group, torch.cuda.set_device) == before


def test_cpu_shims_patch_without_gpu(torch_module):
    torch, _ = torch_module(cuda=False)
    seen = []
    torch.distributed.init_process_group = lambda *a, **k: seen.append((a, k))
    cpu_shims._patch_torch(torch)
    torch.distributed.init_process_group("nccl", rank=0)
    torch.distributed.init_process_group(backend="cpu:gloo,cuda:nccl", device_id=3)
    assert seen == [(("gloo",), {"rank": 0}), ((), {"backend": "gloo"})]
    assert torch.cuda.set_device(1) is None


def test_one_post_import_hook_for_the_rank_side():
    assert cpu_shims.after_import is hooks.after_import is bootstrap.after_import


def test_every_adapters_shims_exist():
    from hpctrain.libraries import LIBRARIES, adapter
    for lib in LIBRARIES:
        assert set(adapter(lib).cpu_shims) <= set(cpu_shims.SHIMS), lib
    with pytest.raises(ValueError, match="unknown CPU shim"):
        cpu_shims.install(["tensorflow"])


@pytest.mark.parametrize("env,expected", [({"SLURM_CPUS_ON_NODE": "16"}, "4"),
                                          ({"SLURM_CPUS_ON_NODE": "2"}, "1")])
def test_threads_are_node_cpus_over_local_ranks(env, expected, monkeypatch):
    for k in ("OMP_NUM_THREADS", "SLURM_CPUS_ON_NODE", "HPCTRAIN_SEED"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    bootstrap.set_environment(RankConfig(seed=10), ME)
    assert os.environ["OMP_NUM_THREADS"] == expected and os.environ["MKL_NUM_THREADS"] == expected
    assert os.environ["HPCTRAIN_SEED"] == "15"  # seed + global rank


def test_threads_from_affinity_and_job_wins(monkeypatch):
    monkeypatch.delenv("SLURM_CPUS_ON_NODE", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    bootstrap.set_environment(RankConfig(), ME)
    assert os.environ["OMP_NUM_THREADS"] == "2"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    bootstrap.set_environment(RankConfig(threads_from_env=True), ME)
    assert os.environ["OMP_NUM_THREADS"] == "3"


def test_rank_env_and_unset(monkeypatch):
    monkeypatch.setenv("HPCTRAIN_HEAD", "node7")
    monkeypatch.setenv("HPCTRAIN_SPARE_PORT", "61235")
    monkeypatch.setenv("SLURM_LOCALID", "0")
    from hpctrain.libraries import adapter
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    bootstrap.set_environment(RankConfig(rank_env=adapter("skrl_jax").rank_env,
                                         unset_env=list(adapter("di_engine").unset_env)), ME)
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
    me = bootstrap.identity(RankConfig(launcher="tasks"))
    assert me == RankIdentity(rank=3, local_rank=1, world_size=4, local_world_size=2, node="node2")


def test_site_env_applied_but_job_env_wins(monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    bootstrap.apply_site_env(RankConfig(env={"NCCL_SOCKET_IFNAME": "ib0", "NCCL_DEBUG": "WARN"}))
    assert os.environ["NCCL_SOCKET_IFNAME"] == "ib0" and os.environ["NCCL_DEBUG"] == "INFO"
    monkeypatch.delenv("NCCL_SOCKET_IFNAME")


def run_copy(tmp_path, config: dict, env_extra=None) -> subprocess.CompletedProcess:
    """The run directory's copy of the rank side, run by path as the job script runs it."""
    run_dir = tmp_path / "run"
    if not (run_dir / "rank").exists():
        shutil.copytree(Path(bootstrap.__file__).parents[1], run_dir / "rank",
                        ignore=shutil.ignore_patterns("__pycache__"))
    (run_dir / "bootstrap.json").write_text(json.dumps(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "RANK", "WORLD"))}
    env.update(HPCTRAIN_RUN_DIR=str(run_dir), **(env_extra or {}))
    return subprocess.run([sys.executable, str(run_dir / "rank"), "run", str(run_dir / "bootstrap.json")],
                          env=env, capture_output=True, text=True, cwd=tmp_path)


def test_site_env_is_set_before_the_program_imports_anything(tmp_path):
    # A module that records the variable at its own import time, imported by the program.
    (tmp_path / "lib_probe.py").write_text("import os\nSEEN = os.environ.get('NCCL_IB_HCA')\n")
    (tmp_path / "prog.py").write_text("import sys, lib_probe\nsys.exit(0 if lib_probe.SEEN == 'mlx5' else 7)\n")
    cfg = {"env": {"NCCL_IB_HCA": "mlx5"}, "cpu_mode": "off", "program": [str(tmp_path / "prog.py")]}
    proc = run_copy(tmp_path, cfg)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (tmp_path / "prog.py").write_text("import sys\nsys.exit(9)\n")
    proc = run_copy(tmp_path, cfg)
    assert proc.returncode == 9  # the program's status is the rank's
    [failure] = read_rank_failures(str(tmp_path / "run"))
    assert (failure.rank, failure.exit_status, failure.error) == (0, 9, "exit status 9")


EXIT_PROGRAM = """
import atexit, os, sys, threading, time, types
out = sys.argv[1]
if sys.argv[2] == "torch":
    sys.modules.setdefault("torch", types.ModuleType("torch"))  # what decides the early exit

def late():
    time.sleep(0.3)
    open(os.path.join(out, "thread"), "w").close()

class Teardown:
    def __del__(self):
        open(os.path.join(out, "teardown"), "w").close()

threading.Thread(target=late).start()  # not a daemon: the exit waits for it
atexit.register(lambda: open(os.path.join(out, "atexit"), "w").write(
    str(os.path.exists(os.path.join(out, "thread")))))
sys.modules["held"] = types.ModuleType("held")
sys.modules["held"].obj = Teardown()  # ended by the interpreter's teardown of modules
print("last words", end="")
sys.exit(int(sys.argv[3]))
"""


@pytest.mark.parametrize("torch,status", [("torch", 0), ("torch", 3), ("none", 0)])
def test_a_finished_torch_rank_skips_only_the_teardown_of_modules(tmp_path, torch, status):
    """The exit a finished rank with torch takes (torch 2.13 aborts now and then in the
    teardown): the program's threads waited for and its exit handlers run, its output whole;
    only the modules' teardown is skipped. A failed rank, or one without torch, exits whole."""
    (tmp_path / "prog.py").write_text(EXIT_PROGRAM)
    out = tmp_path / "out"
    out.mkdir()
    proc = run_copy(tmp_path, {"cpu_mode": "off",
                               "program": [str(tmp_path / "prog.py"), str(out), torch, str(status)]})
    assert proc.returncode == status, proc.stderr
    assert proc.stdout.endswith("last words\n"), proc.stdout
    assert (out / "atexit").read_text() == "True"  # after the thread's end
    assert (out / "teardown").exists() == (torch != "torch" or status != 0)


def test_program_arguments_arrive_byte_exact(tmp_path):
    args = ["$$", "${local_rank}", "$local_rank", "a b", "'\"", "*", "--x=`id`", "ünï", ""]
    (tmp_path / "prog.py").write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    proc = run_copy(tmp_path, {"cpu_mode": "off", "program": [str(tmp_path / "prog.py"), *args]})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1].split("] ", 1)[1]) == args


def test_rank_folder_does_not_shadow_or_leak_into_the_program(tmp_path):
    # The program has modules named like the rank side's; neither sees the other's, and the
    # rank folder is not on the program's sys.path.
    (tmp_path / "records.py").write_text("MINE = True\n")
    (tmp_path / "prog.py").write_text(
        "import sys, records\nassert records.MINE\n"
        "assert not any(p.endswith('/rank') for p in sys.path), sys.path\n")
    proc = run_copy(tmp_path, {"cpu_mode": "off", "program": [str(tmp_path / "prog.py")]})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_records_refuse_corrupt_files(tmp_path):
    from hpctrain.rank.records import RecordError, RunRecord
    path = tmp_path / "run.json"
    for text, match in [("{not json", "not valid JSON"), ("[1, 2]", "expected a JSON object"),
                        ('{"run_id": "x", "name": "n", "site": "s"}', "'backend' is missing"),
                        ('{"run_id": "x", "name": "n", "site": "s", "backend": "slurm", "nodes": "2"}',
                         "'nodes' is str")]:
        path.write_text(text)
        with pytest.raises(RecordError, match=match):
            RunRecord.load(str(path))
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(RecordError, match="not UTF-8"):
        RunRecord.load(str(path))


def test_summarize_names_the_first_failure(tmp_path):
    from hpctrain.rank.records import RankFailure, read_job_failure, write_rank_failure
    status = tmp_path / "status"
    write_rank_failure(str(status), RankFailure(rank=2, node="n2", exit_status=1, error="lost peer",
                                                time="2026-01-01T00:00:01.500+00:00"))
    write_rank_failure(str(status), RankFailure(rank=1, node="n1", exit_status=1, error="boom",
                                                time="2026-01-01T00:00:01.200+00:00"))
    bootstrap.summarize(str(tmp_path), "ranks", 1)
    failure = read_job_failure(str(tmp_path))
    assert failure.message == "rank 1 on n1 failed (exit status 1): boom; 1 more rank(s) failed, see ranks"
    assert [r["rank"] for r in failure.ranks] == [1, 2]


def test_progress_reports_are_rate_limited_and_read_back(tmp_path, monkeypatch):
    from hpctrain.rank import progress
    from hpctrain.rank.records import read_progress
    monkeypatch.setenv("HPCTRAIN_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("HPCTRAIN_RANK", "3")
    monkeypatch.setattr(progress, "_state", {"last_write": 0.0, "first": None, "first_step": None,
                                             "pending": None, "timer": None})
    clock = iter([100.0, 100.5, 102.0])
    monkeypatch.setattr(progress.time, "time", lambda: next(clock))
    progress.report(10, reward=-5, note="not a number")
    progress.report(11, reward=-4)  # within a second of the last write: not written
    [p] = read_progress(str(tmp_path))
    assert (p.rank, p.step, p.metrics, p.rate) == (3, 10, {"reward": -5.0}, None)
    progress.report(14, reward=-2)
    [p] = read_progress(str(tmp_path))
    assert (p.step, p.rate) == (14, 2.0)  # 4 steps in 2 s


def test_a_held_back_report_is_written_without_another_call(tmp_path, monkeypatch):
    """A rank that reports and then blocks (a hang) still shows its last step: the hang
    watcher names the rank that is behind by it."""
    import time
    from hpctrain.rank import progress
    from hpctrain.rank.records import read_progress
    monkeypatch.setenv("HPCTRAIN_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("HPCTRAIN_RANK", "1")
    monkeypatch.setattr(progress, "_state", {"last_write": 0.0, "first": None, "first_step": None,
                                             "pending": None, "timer": None})
    progress.report(1)
    progress.report(2)  # held back: within a second of the first write
    assert [p.step for p in read_progress(str(tmp_path))] == [1]
    for _ in range(100):  # the timer writes it within about a second
        if [p.step for p in read_progress(str(tmp_path))] == [2]:
            break
        time.sleep(0.05)
    assert [p.step for p in read_progress(str(tmp_path))] == [2]


def test_programs_under_the_bootstrap_can_import_hpctrain_progress(tmp_path):
    (tmp_path / "prog.py").write_text("import hpctrain_progress\nhpctrain_progress.report(7, loss=0.5)\n")
    proc = run_copy(tmp_path, {"cpu_mode": "off", "program": [str(tmp_path / "prog.py")]})
    assert proc.returncode == 0, proc.stderr
    from hpctrain.rank.records import read_progress
    [p] = read_progress(str(tmp_path / "run"))
    assert (p.step, p.metrics) == (7, {"loss": 0.5})


def test_the_last_report_is_written_at_exit(tmp_path):
    """A report the once-a-second limit held back (the training's last steps) is written when
    the program ends: status shows where it stopped, not a second earlier."""
    (tmp_path / "prog.py").write_text("import hpctrain_progress\n"
                                      "for i in range(1, 6):\n    hpctrain_progress.report(i, reward=i)\n")
    proc = run_copy(tmp_path, {"cpu_mode": "off", "program": [str(tmp_path / "prog.py")]})
    assert proc.returncode == 0, proc.stderr
    from hpctrain.rank.records import read_progress
    [p] = read_progress(str(tmp_path / "run"))
    assert (p.step, p.metrics) == (5, {"reward": 5.0})

"""The idle-GPU stop (issue 40, item 4): a run idle from its start is stopped after the window
too; only the job's own GPUs are judged (Slurm's binding, else the planned count), never another
job's on the same node; a Slurm run the stop ended is STOPPED, not FAILED 143."""
from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

from hpctrain.backends.base import JobState, State
from hpctrain.backends.slurm import backend as slurm_backend
from hpctrain.rank import sampler as smp


def _sampler(tmp_path: Path, monkeypatch, env: dict, gpus: int = 2) -> smp.Sampler:
    (tmp_path / "status").mkdir(exist_ok=True)
    (tmp_path / "bootstrap.json").write_text(json.dumps(
        {"sample_every": 1, "idle_gpus": {"below": 5, "for": 10, "gpus": gpus}}))
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES", "SLURM_RESTART_COUNT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"SLURMD_NODENAME": "node1", "SLURM_JOB_ID": "7", **env}.items():
        monkeypatch.setenv(name, value)
    s = smp.Sampler(str(tmp_path), os.getpid(), 1)
    s.signalled = 0

    def signal_ranks():
        s.signalled += 1
    monkeypatch.setattr(s, "signal_ranks", signal_ranks)
    return s


def _group(utils: dict[int, float]) -> list:
    # parse_line's rows: (index, uuid, util, mem used, mem total, power)
    return [(i, f"GPU-{i:04d}", u, 10.0, 80000.0, 60.0) for i, u in sorted(utils.items())]


def _feed(s: smp.Sampler, t0: float, utils: dict[int, float], seconds: int) -> None:
    for k in range(seconds + 1):
        group = _group(utils)
        s.check_idle(t0 + k, [r[2] for r in group if s.owns(r[0], r[1])])


def test_idle_from_the_start_is_stopped_after_the_window(tmp_path, monkeypatch):
    s = _sampler(tmp_path, monkeypatch, {})
    assert not s.first_step
    _feed(s, 1000.0, {0: 0.0, 1: 0.0}, 9)
    assert s.signalled == 0 and not (tmp_path / "status" / "idle-stop.json").exists()
    _feed(s, 1010.0, {0: 0.0, 1: 0.0}, 0)
    stop = json.loads((tmp_path / "status" / "idle-stop.json").read_text())
    assert s.signalled == 1 and stop["nodes"] == ["node1"] and stop["since"] == 1000.0


def test_a_busy_gpu_of_the_job_keeps_it_going(tmp_path, monkeypatch):
    s = _sampler(tmp_path, monkeypatch, {})
    _feed(s, 1000.0, {0: 0.0, 1: 80.0}, 30)
    assert s.signalled == 0


def test_another_jobs_gpus_on_the_node_are_not_judged(tmp_path, monkeypatch):
    # The job has GPUs 2 and 3 (Slurm's binding); 0 and 1 are another job's, one idle, one busy.
    s = _sampler(tmp_path, monkeypatch, {"SLURM_JOB_GPUS": "2,3"})
    _feed(s, 1000.0, {0: 0.0, 1: 99.0, 2: 0.0, 3: 0.0}, 10)
    assert s.signalled == 1  # the other job's busy GPU 1 did not keep this idle job alive
    (tmp_path / "b").mkdir()
    s = _sampler(tmp_path / "b", monkeypatch, {"SLURM_STEP_GPUS": "2,3"})
    _feed(s, 1000.0, {0: 0.0, 1: 0.0, 2: 70.0, 3: 0.0}, 30)
    assert s.signalled == 0  # its own GPU 2 works, whatever the others do


def test_own_gpus_from_slurm_cuda_or_the_plan():
    assert smp.own_gpus({"SLURM_STEP_GPUS": "1,3", "CUDA_VISIBLE_DEVICES": "0,1"}, 4) == ({1, 3}, set())
    assert smp.own_gpus({"SLURM_JOB_GPUS": "2"}, 4) == ({2}, set())
    assert smp.own_gpus({"CUDA_VISIBLE_DEVICES": "GPU-ab12,GPU-cd34"}, 2) == (set(), {"GPU-ab12", "GPU-cd34"})
    # Count-only GRES: Slurm binds nothing (the variables are empty): the GPUs the job planned.
    assert smp.own_gpus({"SLURM_JOB_GPUS": "", "CUDA_VISIBLE_DEVICES": ""}, 2) == ({0, 1}, set())
    assert smp.own_gpus({}, 0) is None  # nothing says: every GPU, as before
    assert smp.own_gpus({"CUDA_VISIBLE_DEVICES": "$(x),99999999,0"}, 1) == ({0}, set())


def _run(tmp_path: Path, stopped: dict | None) -> SimpleNamespace:
    (tmp_path / "status").mkdir(exist_ok=True)
    (tmp_path / "status" / "stopped.json").unlink(missing_ok=True)
    if stopped is not None:
        (tmp_path / "status" / "stopped.json").write_text(json.dumps(stopped))
    return SimpleNamespace(path=tmp_path)


def test_a_slurm_run_stopped_for_idle_gpus_is_stopped_not_failed(tmp_path):
    said = {"reason": "idle_gpus", "message": "(idle GPUs: every GPU below 5% for 10s) near iteration 3, nothing was saved"}
    st = slurm_backend._stopped_for_idle(_run(tmp_path, said), JobState(State.FAILED, exit_code=143))
    assert st.state == State.STOPPED and st.reason.startswith("stopped (idle GPUs: every GPU below 5%")
    other = tmp_path / "other"
    other.mkdir()
    for rec, code in (({"reason": "signal", "message": "x"}, 143), (said, 1), (None, 143)):
        st = slurm_backend._stopped_for_idle(_run(other, rec), JobState(State.FAILED, exit_code=code))
        assert st.state == State.FAILED

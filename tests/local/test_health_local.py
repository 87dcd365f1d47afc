"""Issue 29's health gate in a single node's launch process (rank/preflight.agent), for real on this
machine: the stand-in nvidia-smi (tests/fakes: real H100 rows) on PATH, then torchrun's agent.
A GPU held by another process stops the node before torchrun starts, named as the node check
names its failures; a healthy node starts its ranks, and marks the gate's seconds."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import ROOT

PROGRAM = "import os, sys; open(os.path.join(sys.argv[1], 'ran'), 'w').close()\n"


def agent(tmp_path, fault="", dcgm=None):
    (tmp_path / "bootstrap.json").write_text(json.dumps({"sample_every": 0, "health": {
        "expected_gpus": 2, "gpus": True, "ecc": True, "row_remap": True, "retired_pages": True,
        "foreign_memory_mib": 1024, "same_driver": True, "timeout": 30,
        "dcgm_diag": dcgm is not None}}))
    (tmp_path / "program.py").write_text(PROGRAM)
    env = dict(os.environ, PATH=f"{ROOT / 'tests' / 'fakes'}:{os.environ['PATH']}",
               FAKE_SMI_GPUS="2", FAKE_SMI_FAULT=fault, HPCTRAIN_RUN_DIR=str(tmp_path),
               SLURMD_NODENAME="here", HPCTRAIN_JOB_ID="5", **(dcgm or {}))
    return subprocess.run([sys.executable, "-m", "hpctrain.rank", "agent", "--standalone",
                           "--nnodes=1", "--nproc-per-node=1", str(tmp_path / "program.py"),
                           str(tmp_path)], env=env, capture_output=True, text=True, timeout=120)


def test_a_gpu_held_by_another_process_stops_the_node_before_torchrun(tmp_path):
    done = agent(tmp_path, fault="memory:1:30000")
    assert done.returncode == 1, done.stdout + done.stderr
    said = (tmp_path / "status" / "preflight-failed-here.txt").read_text()
    assert said.startswith("here failed the health gate: GPU 1 (00000000:00:07.0, "
                           "GPU-c1f2461c-ed11-f4b9-2868-865409eb3d01): 30000 MiB in use"), said
    assert not (tmp_path / "ran").exists() and "torch.distributed.run" not in done.stderr


def test_a_healthy_node_starts_its_ranks_and_marks_the_gate(tmp_path):
    done = agent(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "ran").exists()
    assert "hpctrain preflight: here: health gate passed: 2 GPU(s), driver 580.159.04" in done.stdout
    marks = json.loads((tmp_path / "status" / "phases" / "5-0" / "node-here.json").read_text())
    assert marks["launch"] <= marks["imported"] <= marks["checked"] and marks["health_s"] > 0


def test_a_gpu_failing_dcgms_diagnostic_stops_the_node_before_torchrun(tmp_path):
    """health.dcgm_diag with the dcgmi stand-in on PATH (DCGM's JSON layout, its exit status):
    the gate runs `dcgmi diag -r 1 -j` and the GPU it failed stops the node."""
    done = agent(tmp_path, dcgm={"FAKE_DCGMI_FAULT_here": "1:Error with the GPU's PCIe link"})
    assert done.returncode == 1, done.stdout + done.stderr
    said = (tmp_path / "status" / "preflight-failed-here.txt").read_text()
    assert said.strip() == ("here failed the health gate: dcgmi diag -r 1: software on GPU 1: "
                            "Error with the GPU's PCIe link"), said
    assert not (tmp_path / "ran").exists()
    healthy = tmp_path / "healthy"
    healthy.mkdir()
    done = agent(healthy, dcgm={})
    assert done.returncode == 0 and (healthy / "ran").exists(), done.stdout + done.stderr

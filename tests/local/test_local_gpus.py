"""GPU jobs are checked against the GPUs there are (issue 28, item 3), with a stand-in
`nvidia-smi` on PATH that prints the real bytes an H100 machine printed
(tests/fixtures/nvidia-smi), so the logic runs on this CPU-only machine."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from hpctrain.job.checks import local_gpus

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"


def _stand_in(tmp_path: Path) -> dict:
    """A PATH whose nvidia-smi prints the fixture's `nvidia-smi -L` output and exit status."""
    text = (FIXTURE / "nvidia-smi-h100.txt").read_text()
    block = re.search(r"^## nvidia-smi -L\n(.*?)^## rc=(\d+)\n", text, re.S | re.M)
    out, rc = block.group(1), block.group(2)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "listing.txt").write_text(out)
    smi = bindir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\n[ "$1" = -L ] || exit 2\ncat "{bindir}/listing.txt"\nexit {rc}\n')
    smi.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["PATH"] = f"{bindir}:{env.get('PATH', '')}"
    return env


pytestmark = pytest.mark.skipif(not FIXTURE.is_dir(), reason="no nvidia-smi fixtures here")


def test_this_machines_gpus_from_nvidia_smi_and_cuda_visible_devices(tmp_path):
    env = _stand_in(tmp_path)
    assert local_gpus(env) == (1, "nvidia-smi -L")
    assert local_gpus(dict(env, CUDA_VISIBLE_DEVICES="0,1"))[0] == 2
    assert local_gpus(dict(env, CUDA_VISIBLE_DEVICES=""))[0] == 0
    assert local_gpus(dict(env, CUDA_VISIBLE_DEVICES="-1"))[0] == 0
    assert local_gpus({"PATH": str(tmp_path / "nowhere")}) == (0, "no nvidia-smi on PATH")


def _job(tmp_path: Path, **resources) -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    doc = {"name": "gpu-check", "library": "command", "script": "train.py",
           "resources": {"nodes": 1, "time": "00:05:00", **resources}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_more_gpus_than_this_machine_has_is_refused_naming_both(cli, tmp_path):
    env = _stand_in(tmp_path)
    proc = cli("submit", _job(tmp_path, gpus_per_node=2), env=env, check=False, cwd=tmp_path)
    assert proc.returncode == 2
    assert "asks for 2 GPU(s) per node, and this machine has 1 (nvidia-smi -L)" in proc.stderr
    assert "gpus_per_node=1" in proc.stderr


def test_a_gpu_job_on_a_machine_without_gpus_says_how_to_run_on_cpu(cli, tmp_path):
    env = dict(_stand_in(tmp_path), PATH=os.environ.get("PATH", ""), CUDA_VISIBLE_DEVICES="")
    proc = cli("submit", _job(tmp_path, gpus_per_node=1), env=env, check=False, cwd=tmp_path)
    assert proc.returncode == 2 and "this machine has none" in proc.stderr
    assert "--set resources.gpus_per_node=0" in proc.stderr


def test_two_ranks_on_one_gpu_are_refused_at_load(cli, tmp_path):
    proc = cli("validate", _job(tmp_path, gpus_per_node=1, procs_per_node=2), check=False,
               cwd=tmp_path)
    assert proc.returncode == 2
    assert "2 ranks per node but 1 GPU(s) per node" in proc.stderr and "NCCL" in proc.stderr
    assert "procs_per_node: 1" in proc.stderr

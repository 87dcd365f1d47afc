"""scripts/gpu-check.sh (issue 28, item 5) on this CPU machine, whole: a stand-in nvidia-smi on
PATH prints the real bytes of an H100's `nvidia-smi -L` (tests/fixtures/nvidia-smi/, copied from the shared fixtures), torch
here has no CUDA, so the script must say that and run every check on the CPU: the probe job, each
installed RL library, a SIGTERM that saves and a --resume that continues, one table."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.conftest import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "nvidia-smi" / "nvidia-smi-h100.txt"


def _stand_in(bin_dir: Path) -> None:
    """nvidia-smi -L as the H100 printed it (its exact bytes, cut from the fixture file)."""
    text = FIXTURE.read_bytes().decode()
    listing = text.split("## nvidia-smi -L\n", 1)[1].split("## rc=", 1)[0]
    (bin_dir / "nvidia-smi-L.txt").write_text(listing)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f'#!/bin/bash\n[[ "$*" == "-L" ]] || exit 2\ncat {bin_dir / "nvidia-smi-L.txt"}\n')
    smi.chmod(0o755)


def test_gpu_check_on_a_machine_whose_torch_has_no_cuda(tmp_path):
    assert FIXTURE.is_file(), FIXTURE
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stand_in(bin_dir)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", TMPDIR=str(tmp_path),
               HPCTRAIN_HOME=str(tmp_path / "home"))
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-4000:]
    rows = {}
    for line in out.splitlines():
        m = re.match(r"^(\S+)\s*\| (\S+)\s*\| (.*)$", line)
        if m and m.group(1) != "check":
            rows[m.group(1)] = (m.group(2), m.group(3))
    assert re.search(r"^check\s*\| result\s*\| detail$", out, re.M), out
    # The stand-in's listing read right, and why the checks still run on the CPU.
    assert rows["gpus"][0] == "cpu", rows
    assert "nvidia-smi lists 1 GPU(s): 1x NVIDIA H100 80GB HBM3" in rows["gpus"][1]
    assert "cannot use CUDA: the checks run on cpu" in rows["gpus"][1]
    assert rows["probe"][0] == "ok" and rows["probe"][1].startswith("rank 0 on cpu"), rows
    assert "NCCL: " in rows["probe"][1]
    for lib in ("rl_games", "rsl_rl", "skrl_torch", "skrl_jax"):
        assert rows[lib] == ("ok", "3 iterations on cpu, COMPLETED") or rows[lib][0] == "skip", rows
    assert rows["rsl_rl"][0] == "ok"  # installed here: it must have run
    assert rows["stop"][0] == "ok" and "STOPPED (SIGTERM)" in rows["stop"][1], rows
    assert "saved checkpoints/model_" in rows["stop"][1]
    assert rows["resume"][0] == "ok" and "continued from checkpoints/model_" in rows["resume"][1], rows
    assert "device: cpu" in out
    assert not list(tmp_path.glob("hpctrain-gpu-check.*"))  # its scratch runs are removed

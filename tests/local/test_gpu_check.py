"""scripts/gpu-check.sh (issue 28, item 5) on this CPU machine, whole: a stand-in nvidia-smi on
PATH prints the real bytes of an H100's `nvidia-smi -L` (tests/fixtures/nvidia-smi/, copied from the shared fixtures), torch
here has no CUDA, so the script must say that and run every check on the CPU: the probe job, the
RL library asked for (--libraries rsl_rl: every library is trained for real elsewhere in the
suite), a SIGTERM that saves and a --resume that continues, a training's report; the checks
that need a GPU (health gate, foreign memory, idle stop, members sharing a GPU) say so; one table. And
--libraries with a name it does not know is refused before any run starts."""
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


SCRIPT = ROOT / "scripts" / "gpu-check.sh"
LIBRARIES = ("rl_games", "rsl_rl", "skrl_torch", "skrl_jax")


def test_gpu_check_on_a_machine_whose_torch_has_no_cuda(tmp_path):
    assert FIXTURE.is_file(), FIXTURE
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stand_in(bin_dir)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", TMPDIR=str(tmp_path),
               HPCTRAIN_HOME=str(tmp_path / "home"))
    proc = subprocess.run(["bash", str(SCRIPT), "--libraries", "rsl_rl"], cwd=tmp_path, env=env,
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
    # The same table video jobs are routed by: an H100 has no RT cores.
    assert rows["render"] == ("no", "NVIDIA H100 80GB HBM3: H100 cannot render (no RT cores)"), rows
    assert rows["probe"][0] == "ok" and rows["probe"][1].startswith("rank 0 on cpu"), rows
    assert "NCCL: " in rows["probe"][1]
    # Only rsl_rl (installed here) was asked for: it ran; the others are skipped, in their places.
    assert rows["rsl_rl"] == ("ok", "3 iterations on cpu, COMPLETED"), rows
    for lib in LIBRARIES:
        if lib != "rsl_rl":
            assert rows[lib] == ("skip", "not asked (--libraries)"), rows
    assert list(rows) == ["gpus", "render", "probe", "health", "foreign", *LIBRARIES, "stop", "resume",
                          "report", "idle", "pbt"], rows
    assert rows["stop"][0] == "ok" and "STOPPED (SIGTERM)" in rows["stop"][1], rows
    assert "saved checkpoints/model_" in rows["stop"][1]
    assert rows["resume"][0] == "ok" and "continued from checkpoints/model_" in rows["resume"][1], rows
    # The checks that need a GPU say why they did not run; the report ran.
    assert rows["health"][0] == rows["foreign"][0] == rows["idle"][0] == "cpu", rows
    assert rows["report"][0] == "cpu" and " on cpu, loss " in rows["report"][1], rows
    assert "no GPU samples" in rows["report"][1] and "CPU efficiency" in rows["report"][1]
    assert rows["pbt"][0] == "cpu" and "need one" in rows["pbt"][1], rows
    assert "device: cpu" in out
    assert not list(tmp_path.glob("hpctrain-gpu-check.*"))  # its scratch runs are removed


def test_gpu_check_refuses_an_unknown_library_before_any_run(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path), HPCTRAIN_HOME=str(tmp_path / "home"))
    for given in ("nosuch", "rsl_rl,nosuch", "rsl_rl,"):
        proc = subprocess.run(["bash", str(SCRIPT), "--libraries", given], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"--libraries '{given}'" in proc.stderr, proc.stderr
        assert "names from: rl_games, rsl_rl, skrl_torch, skrl_jax" in proc.stderr, proc.stderr
        # No run started: no check was reported, no table, no scratch runs directory made.
        assert "gpu-check: gpus" not in proc.stderr and "| result" not in proc.stdout, proc
        assert not list(tmp_path.glob("hpctrain-gpu-check.*"))
        assert not (tmp_path / "home").exists()
    # --help documents the option.
    helped = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True,
                            timeout=60)
    assert helped.returncode == 0, helped.stderr
    assert "[--libraries LIST]" in helped.stdout and "--libraries LIST  train only" in helped.stdout
    assert "set -uo" not in helped.stdout  # the header only

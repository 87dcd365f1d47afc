"""`hpctrain export` for real: tiny runs of the three PyTorch libraries' examples trained on the
local site (1 rank, 2 updates), each exported to ONNX and TorchScript under the run's
interpreter, the check passing; then what must not export (a checkpoint with NaN weights, a
pickle, a link, a mismatching export), each an `error:` line with nothing left in exports/."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, submitted
from tests.operate_helpers import status_json

EXAMPLES = {"rsl_rl": "rsl_rl_pendulum", "rl_games": "rl_games_pendulum", "skrl": "skrl_torch_pendulum"}


def _train(cli, library: str) -> Path:
    proc = cli("submit", ROOT / "examples/rl" / f"{EXAMPLES[library]}.yaml", "--site", "local",
               "--set", "resources.nodes=1", "--set", "resources.procs_per_node=1",
               "--set", f"python={sys.executable}", "--set", "sample_every=0",
               "--set", "args=[--updates,2,--num-envs,8,--steps,16]", "--wait", timeout=300)
    _, run_dir = submitted(proc.stdout)
    assert status_json(cli, run_dir.name)["state"]["state"] == "COMPLETED", \
        (run_dir / "logs" / "job.out").read_text(errors="replace")[-3000:]
    return run_dir


def _left(run_dir: Path) -> list[str]:
    folder = run_dir / "exports"
    return sorted(os.listdir(folder)) if folder.exists() else []


@pytest.mark.parametrize("library", sorted(EXAMPLES))
def test_export_writes_checked_onnx_and_torchscript(cli, library):
    run_dir = _train(cli, library)
    record = json.loads(cli("export", run_dir.name, "--json", timeout=300).stdout)
    assert record["library"] == library and record["observations"] == 3 and record["actions"] == 1
    assert {f["name"] for f in record["files"]} == {"policy.onnx", "policy.pt"}
    for f in record["files"]:
        assert Path(f["path"]).stat().st_size == f["bytes"] > 1000, f
        assert Path(f["path"]).parent == run_dir / "exports" / Path(record["checkpoint"]).stem
    check = record["check"]
    assert check["samples"] == 64 and set(check["max_diff"]) == {"onnx", "torchscript"}
    assert all(0 <= d <= check["tolerance"] == 1e-4 for d in check["max_diff"].values()), check
    assert record["config"].endswith("params/agent.yaml"), record
    # The exported ONNX file answers as the checkpoint's policy did: here, in another process.
    import numpy as np
    import onnxruntime
    session = onnxruntime.InferenceSession(str(run_dir / record["folder"] / "policy.onnx"))
    out = session.run(None, {session.get_inputs()[0].name: np.zeros((1, 3), np.float32)})[0]
    assert out.shape == (1, 1) and np.isfinite(out).all()
    if library == "rsl_rl":
        _refusals(cli, run_dir)


def _refusals(cli, run_dir: Path) -> None:
    import torch
    folder = run_dir / "checkpoints"
    good = max(folder.glob("model_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    before = _left(run_dir)
    assert before == [good.stem], before

    # NaN weights: the checkpoint's own policy gives no finite actions -> refused, nothing written.
    ckpt = torch.load(good, weights_only=True)
    ckpt["actor_state_dict"]["mlp.0.weight"][0, 0] = float("nan")
    torch.save(ckpt, folder / "model_90.pt")
    # A pickle of an arbitrary object: torch.load(weights_only=True) refuses it.
    import argparse
    torch.save({"actor_state_dict": argparse.Namespace(x=1)}, folder / "model_91.pt")
    # A link to the good checkpoint: never read through.
    os.symlink(good, folder / "model_92.pt")
    for number, words in (("90", "not finite"), ("91", "weights_only"), ("92", "no checkpoint numbered 92")):
        proc = cli("export", run_dir.name, "--checkpoint", number, check=False, timeout=300)
        assert proc.returncode == 2 and proc.stderr.startswith("error: "), (number, proc.stderr)
        assert words in proc.stderr and "Traceback" not in proc.stderr, (number, proc.stderr)
        assert _left(run_dir) == before, (number, _left(run_dir))
    proc = cli("export", run_dir.name, "--checkpoint", "checkpoints/model_92.pt", check=False)
    assert proc.returncode == 2 and "symbolic link" in proc.stderr, proc.stderr
    proc = cli("export", run_dir.name, "--checkpoint", "best", check=False)
    assert proc.returncode == 2 and "has no evaluation" in proc.stderr, proc.stderr  # no reward
    # The same refusal from a job derived from the run (how a cluster's or a container's run is
    # exported): the exporter's own error, read back from the job's output, and nothing written.
    import argparse
    from hpctrain import cli as hpctrain_cli
    from hpctrain.errors import HpctrainError
    from hpctrain.follow import export
    chosen = export.choose(str(run_dir), "90")
    with pytest.raises(HpctrainError, match="not finite"):
        hpctrain_cli._export_job(argparse.Namespace(time=None, json=True, dry_run=False, wait=True),
                                 chosen)
    assert _left(run_dir) == before
    # A config whose widths would build a network far larger than the checkpoint: refused
    # before anything is allocated.
    config = folder / "params" / "agent.yaml"
    config.write_text(config.read_text().replace("- 64\n", "- 60000\n"))
    proc = cli("export", run_dir.name, "--checkpoint", good.stem.split("_")[1], check=False, timeout=300)
    assert proc.returncode == 2 and "describes a network of" in proc.stderr, proc.stderr
    assert _left(run_dir) == before


def test_a_mismatching_export_is_an_error_and_leaves_nothing(tmp_path, monkeypatch):
    """The check itself: an exported module that is not the checkpoint's policy (its actions
    off by 1e-3) is refused after export, before anything reaches the run directory."""
    pytest.importorskip("rsl_rl")
    import subprocess
    out = tmp_path / "run"
    subprocess.run([sys.executable, ROOT / "examples/rl/rsl_rl_pendulum.py", "--updates", "1",
                    "--num-envs", "4", "--steps", "8", "--out", out], check=True,
                   capture_output=True, timeout=300)
    from hpctrain.rank.after import export, policies
    from hpctrain.rank.after.sources import ExportError
    real = policies.BUILDERS["rsl_rl"]

    def off(ckpt, cfg, where):
        policy = real(ckpt, cfg, where)
        reference = policy.reference
        policy.reference = lambda x: reference(x) + 1e-3
        return policy

    monkeypatch.setitem(policies.BUILDERS, "rsl_rl", off)
    with pytest.raises(ExportError, match=r"differ from the checkpoint's policy by 0\.001"):
        export.export(str(out), "rsl_rl", "checkpoints/model_0.pt", "model_0", 8)
    assert not (out / "exports").exists() or os.listdir(out / "exports") == []
    monkeypatch.setitem(policies.BUILDERS, "rsl_rl", real)
    record = export.export(str(out), "rsl_rl", "checkpoints/model_0.pt", "model_0", 8)
    assert os.listdir(out / "exports") == ["model_0"] and record["check"]["samples"] == 8


NORMALISED = """
import runpy, sys
import rl_games_pendulum as ex
config = ex.agent_config
def normalised(*a, **k):
    out = config(*a, **k)
    out["params"]["config"]["normalize_input"] = True
    return out
ex.agent_config = normalised
sys.argv = ["x", "--updates", "2", "--num-envs", "8", "--steps", "16", "--out", sys.argv[1]]
ex.main()
"""


def test_rl_games_normalised_observations_export(tmp_path):
    """rl-games keeps its observation normaliser as a ScriptModule: the export takes the same
    normaliser unscripted, and the check holds it to the checkpoint's policy."""
    pytest.importorskip("rl_games")
    import subprocess
    out = tmp_path / "run"
    subprocess.run([sys.executable, "-c", NORMALISED, out], check=True, capture_output=True,
                   timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT / "examples/rl")})
    from hpctrain.rank.after import export
    [ckpt] = (out / "checkpoints" / "nn").glob("*.pth")
    record = export.export(str(out), "rl_games", str(ckpt.relative_to(out)), "norm", 16)
    assert record["policy"].endswith("normalised observations"), record
    assert max(record["check"]["max_diff"].values()) <= 1e-4, record

"""Video on this machine (issue 52, item 3): `hpctrain validate` and `submit` read the real
nvidia-smi bytes (the stand-in on PATH prints the H100 fixture; FAKE_SMI_NAME puts another
model's name in the same rows), refuse a video job on GPUs that cannot render before any run is
written, and accept it where they can, with the real Isaac Lab 3.0 install's --video flags. The
clip count is held by the hook on the real 3.0 VideoRecorder class."""
from __future__ import annotations

import json
import os
import subprocess

from tests.conftest import ROOT
from tests.isaaclab3 import ASSETS, VENV, cartpole_job, write_job

FAKES = ROOT / "tests" / "fakes"


def _job(tmp_path, **video):
    job = cartpole_job("video-local", 2)
    job["resources"] = {"nodes": 1, "gpus_per_node": 1, "time": "00:10:00"}
    job["video"] = video or {"length": 50}
    return write_job(tmp_path, job)


def test_a_video_job_is_refused_on_an_h100_and_accepted_on_an_l40s(cli, tmp_path):
    path = _job(tmp_path)
    smi = {"PATH": f"{FAKES}:{os.environ['PATH']}", "FAKE_SMI_GPUS": "2"}
    for command in ("validate", "submit"):
        proc = cli(command, path, "--site", "local", check=False, env=smi)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert ("the GPUs of this machine cannot render: NVIDIA H100 80GB HBM3: H100 cannot "
                "render (no RT cores) (nvidia-smi lists 2 GPU(s))") in errors[0], errors
        assert "fix: run it on a site whose GPUs render" in proc.stderr
    assert not (tmp_path / "runs").exists()  # refused before anything was written
    proc = cli("validate", path, "--site", "local", env=dict(smi, FAKE_SMI_NAME="NVIDIA L40S"))
    program = next(line for line in proc.stdout.splitlines() if line.strip().startswith("program"))
    # The real install's release (3.0) decides the flags: one clip of 50 steps.
    assert program.endswith("--video --video_length=50 --video_interval=0 --num_envs 32 "
                            "--max_iterations 2 --external_callback isaaclab_probe.install"), program
    assert "video  1 clip of 50 steps; this machine: NVIDIA L40S: L40S renders (RT cores)" \
        in proc.stdout, proc.stdout
    # No nvidia-smi at all: cannot tell, refused.
    (tmp_path / "empty").mkdir()
    proc = cli("validate", path, "--site", "local", check=False, env={"PATH": str(tmp_path / "empty")})
    assert proc.returncode == 2 and "cannot tell whether the GPUs of this machine" in proc.stderr


RECORDER = """
import json, os, sys
from hpctrain.rank.during import train_hooks
train_hooks.install(["video"])  # armed as the bootstrap arms it
import isaaclab.envs.utils.video_recorder as vr
from isaaclab.envs.utils.video_recorder_cfg import VideoRecorderCfg
vr.ImageSequenceClip = vr.ImageSequenceClip or object  # moviepy is not in the suite's venv: no clip is written here
rec = vr.VideoRecorder(VideoRecorderCfg(output_dir=sys.argv[1], video_interval=10), env=None)
print(json.dumps({"started": [s for s in range(1, 200) if rec._check_trigger(s)],
                  "applied": [m for m in train_hooks.APPLIED]}))
"""


def test_the_clip_count_caps_the_real_isaaclab_recorder(tmp_path):
    out = subprocess.run([str(VENV / "bin" / "python"), "-c", RECORDER, str(tmp_path)],
                         cwd=ROOT, env=dict(os.environ, HPCTRAIN_VIDEO_COUNT="3",
                                            ISAACSIM_ASSET_ROOT=str(ASSETS), PYTHONPATH=str(ROOT)),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    said = json.loads(out.stdout.strip().splitlines()[-1])
    assert said["started"] == [1, 11, 21], said  # 3 clips, every 10 steps, then none
    assert "warning" not in out.stderr, out.stderr[-2000:]

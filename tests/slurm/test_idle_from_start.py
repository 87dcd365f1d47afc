"""Issue 40, item 4, on the real local Slurm cluster: a 1-GPU job (count-only GRES: Slurm binds
no device, so the job's GPU is the one it planned, GPU 0) whose program never reports progress,
on a node whose stand-in nvidia-smi shows GPU 0 idle and GPUs 1-3 (another job's) busy. The
idle-GPU stop judges only GPU 0, from the start: after the window the run ends STOPPED for idle
GPUs, not FAILED 143."""
from __future__ import annotations

import json
import sys

from tests.conftest import ROOT, submitted, wait_for_job

FAKES = ROOT / "tests" / "fakes"


def test_a_run_idle_from_its_start_is_stopped_judging_only_its_gpu(cli, cluster, tmp_path):
    program = tmp_path / "stuck.py"
    program.write_text("import time\ntime.sleep(300)  # stuck before training: no progress, GPU idle\n")
    setup = f"export PATH={FAKES}:$PATH FAKE_SMI_GPUS=4 FAKE_SMI_UTIL=0,90,90,90"
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps({
        "name": "idle-from-start", "library": "command", "script": str(program),
        "python": sys.executable, "setup": [setup], "sample_every": 0.3,
        "idle_gpus": {"below": 5, "for": 3},
        "resources": {"nodes": 1, "procs_per_node": 1, "gpus_per_node": 1, "time": "00:05:00"}}))
    job_id, run_dir = submitted(cli("submit", job, "--site", cluster, cwd=ROOT).stdout)
    try:
        info = wait_for_job(job_id, timeout=120)
    finally:  # (what the sampler saw, when the stop never comes: it once did not, in a whole run)
        log = "".join(p.read_text() for p in (run_dir / "logs").glob("slurm-*.out"))
        print(log[-3000:], sorted(p.name for p in (run_dir / "status").iterdir()),
              [p.read_text()[-1500:] for p in (run_dir / "usage").glob("*.jsonl")])
    idle = json.loads((run_dir / "status" / "idle-stop.json").read_text())
    assert idle["below"] == 5 and idle["for"] == 3 and len(idle["nodes"]) == 1, (idle, log[-3000:])
    lines = [json.loads(x) for x in next((run_dir / "usage").glob("*.jsonl")).read_text().splitlines()]
    assert not any(x.get("kind") == "first_step" for x in lines)  # it never reported a step
    assert any("g" in x and [r[1] for r in x["g"]] == [0.0, 90.0, 90.0, 90.0] for x in lines), lines[:8]
    stopped = json.loads((run_dir / "status" / "stopped.json").read_text())
    assert stopped["reason"] == "idle_gpus", (stopped, log[-3000:])
    assert info["JobState"] == "FAILED" and info["ExitCode"] == "143:0", info  # Slurm's words
    st = json.loads(cli("status", run_dir.name, "--json").stdout)["state"]
    assert st["state"] == "STOPPED" and "idle GPUs: every GPU below 5% for 3s" in st["reason"], st

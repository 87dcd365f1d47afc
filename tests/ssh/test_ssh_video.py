"""A video job on workstations over ssh (issue 52, item 3): the GPUs are asked of each host's
nvidia-smi over the real sshd, at validate and submit; the lab's hosts have none, so hpctrain
cannot tell that they render and refuses before anything starts, naming the host."""
from __future__ import annotations

import yaml

from tests.operate_helpers import job_file
from tests.ssh.helpers import lab_site


def test_a_video_job_on_hosts_without_nvidia_smi_is_refused_naming_the_host(cli, lab, sites, tmp_path):
    lab_site(sites, "lab-gpus", limits={"max_gpus_per_node": 1, "cpus_per_node": 2})
    path = job_file(tmp_path, "ssh-video")
    doc = yaml.safe_load(path.read_text())
    doc["resources"].update(gpus_per_node=1, procs_per_node=1)
    doc["video"] = {"length": 20}
    path.write_text(yaml.safe_dump(doc))
    for command in ("validate", "submit"):
        proc = cli(command, path, "--site", "lab-gpus", check=False, timeout=120)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert "cannot tell whether the GPUs of host node5 can render" in errors[0], errors
        assert "nvidia-smi on node5 gave no GPU name (exit 127)" in errors[0], errors
    runs = tmp_path / "runs"
    assert not runs.exists() or not any(runs.rglob("run.json")), "a refused submit left a run"

"""A container on this machine (site `local`, no scheduler): Podman runs the torchrun of a real
DDP training, 1 node x 2 ranks, through the same supervisor as on a cluster's nodes."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import submitted
from tests.operate_helpers import status_json
from tests.slurm.test_containers import IMAGE, PODMAN, PROBE, mounts, where

JOB = "examples/resumable_train.yaml"


def test_local_podman_trains_two_ranks_in_a_container(cli, tmp_path):
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(PROBE)
    container = {"runtime": "podman", "image": IMAGE, "mounts": mounts(probe),
                 # this machine's Podman, as on the test cluster's nodes (tests/cluster/README.md)
                 "options": ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]}
    site = tmp_path / "box.yaml"
    site.write_text("name: box\nscheduler: local\nlimits: {max_nodes: 1}\n"
                    "containers: {commands: {podman: podman --runtime runc --cgroup-manager=cgroupfs}}\n")
    proc = cli("submit", JOB, "--site", str(site), "--wait", "--set", f"python={sys.executable}",
               "--set", "resources.nodes=1", "--set", f"container={json.dumps(container)}",
               "--set", f"env.PYTHONPATH={probe}",
               "--set", "args=[--iterations,4,--sleep,0.1,--save-every,2]", timeout=300)
    job_id, run_dir = submitted(proc.stdout)
    ranks = sorted(json.loads(p.read_text())["rank"] for p in (run_dir / "results").glob("rank-*.json"))
    assert ranks == [0, 1], proc.stdout
    probes = where(run_dir)
    assert len(probes) == 2 and {p[1] for p in probes} == {"True"}, probes
    assert status_json(cli, run_dir.name)["state"]["state"] == "COMPLETED"
    # Nothing left: --rm removed the container once it exited, and the supervisor checked.
    left = subprocess.run([*PODMAN, "ps", "-a", "--format", "{{.Names}}"], capture_output=True,
                          text=True, check=True).stdout.split()
    assert f"hpct-{job_id.removeprefix('local-')}-0-0" not in left, left

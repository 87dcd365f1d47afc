"""`hpctrain site detect` on the real local Slurm cluster: the profile it writes is valid, says
why for each key, and follows what the nodes say (a head name resolving to loopback on its own
node makes it choose the interface whose address the other node reached)."""
from __future__ import annotations

import sys

import yaml

from tests.conftest import ROOT

NODE_HOSTS = ROOT / "tests" / "cluster" / "node-hosts.sh"


def detect(cli, tmp_path, name="found"):
    out = tmp_path / f"{name}.yaml"
    proc = cli("site", "detect", name, "--partition", "debug", "--nodelist", "node1,node2",
               "--python", sys.executable, "--out", out, check=False, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, yaml.safe_load(out.read_text()), out.read_text(), proc


def test_site_detect_writes_a_valid_commented_profile(cli, cluster, tmp_path):
    out, doc, text, proc = detect(cli, tmp_path)
    assert f"wrote {out} (valid)" in proc.stdout
    # (the nodes' count-only GRES GPUs: four a node, asked for as --gpus-per-node)
    assert doc["scheduler"] == "slurm" and doc["cpu_mode"] == "auto"
    assert doc["slurm_version"].startswith("22.05.")  # the release it was detected on
    assert doc["gpu_request"] == "gpus-per-node" and "gpu_type" not in doc
    assert doc["limits"]["max_nodes"] == 4 and doc["limits"]["cpus_per_node"] == 2
    assert doc["limits"]["mem_per_node"] == "4000M" and doc["limits"]["max_gpus_per_node"] == 4
    assert doc["head"] == {"mode": "nodename"}
    assert doc["port"] == {"base": 61000, "span": 4536}
    assert doc["defaults"]["resources"]["partition"] == "debug"
    assert "module_init" in doc and doc["module_init"].endswith("lmod/init/bash")
    # the evidence, in comments
    assert "select/cons_tres takes --gpus-per-node" in text
    assert "from node2: node1 -> 10.231.0.11: reached" in text
    assert "preempt_send_user_signal is not set" in text
    assert "# sinfo: 4 nodes in 'debug'" in text
    assert "InfiniBand devices: none" in text
    # and jobs load against it
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"name": "t", "script": "examples/cartpole_ppo.py",
                                   "resources": {"nodes": 2}}))
    check = cli("validate", job, "--site", out, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    # Count-only GRES and no model in the nodes' features: no partition is known to render, and a
    # job with video: is refused before queueing (issue 52, item 3).
    assert "gpu_models" not in doc and "no GPU model in sinfo's GRES types or node features" in text
    job.write_text(yaml.safe_dump({"name": "t", "script": "examples/cartpole_ppo.py",
                                   "resources": {"nodes": 1, "gpus_per_node": 1},
                                   "video": {"length": 20}}))
    check = cli("validate", job, "--site", out, check=False)
    assert check.returncode == 2 and "cannot tell whether the GPUs of partition 'debug'" in check.stderr, \
        check.stdout + check.stderr


def test_site_detect_chooses_the_interface_when_the_name_is_loopback(cli, cluster, tmp_path):
    subprocess_run(["bash", str(NODE_HOSTS), "node1", "loopback"])
    try:
        _, doc, text, _ = detect(cli, tmp_path, "loop")
    finally:
        subprocess_run(["bash", str(NODE_HOSTS), "node1", "restore"])
    assert doc.get("head", {}).get("mode") == "interface", text
    assert "on node1: 'node1' -> 127.0.1.1 (loopback!)" in text
    assert "-> interface " in text and "resolves to loopback on the head, 10.231.0.11 on" in text
    iface = doc["head"]["interface"]
    assert f"{iface} 10.231.0.11/24" in text


def subprocess_run(cmd):
    import subprocess
    subprocess.run(cmd, check=True)

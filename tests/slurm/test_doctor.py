"""`hpctrain doctor` on the real local Slurm cluster: healthy, and with each fault injected from
outside the job (a head name resolving to loopback on its own node, the rendezvous port blocked
between two nodes, a run directory one node cannot write), each named by the right check."""
from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT

NODE_HOSTS = ROOT / "tests" / "cluster" / "node-hosts.sh"
NODE2_NET = "--net=/run/netns/hpct-node2"
NODE2_MNT = "--mount=/run/hpctrain-localcluster/ns/node2.mnt"


def doctor(cli, cluster, *sets, job=None):
    args = ["doctor"] + ([job] if job else []) + ["--site", cluster, "--set", f"python={sys.executable}",
            # node1 is the head, whatever else runs on the cluster
            "--set", "sbatch.nodelist=node1,node2", "--set", "launcher.preflight_timeout=15"]
    for s in sets:
        args += ["--set", s]
    return cli(*args, check=False, timeout=600)


def verdicts(stdout: str) -> dict[str, str]:
    """{check name: verdict} from the report's table."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"^\s*(ok|FAIL|not run)\s{2}(\S.*?)\s{2,}", line)
        if m:
            out[m.group(2).strip()] = m.group(1)
    return out


def test_doctor_healthy_cluster_passes_every_check_with_the_jobs_own_settings(cli, cluster,
                                                                             tmp_path):
    # examples/ddp_check.yaml: 2 ranks per node, its own seed and time; its program is replaced.
    # (One doctor run for both: a healthy cluster, checked with a job's own settings.)
    # An Isaac asset root (isaaclab_assets) the nodes can read, of the suite's shape: its own, as
    # the suite's (tests/isaaclab3.py) may still be installing beside this session.
    ASSETS = tmp_path / "assets"
    for part in ("Robots", "Environments"):
        (ASSETS / "Isaac" / "IsaacLab" / part).mkdir(parents=True)
    proc = doctor(cli, cluster, f"isaaclab_assets={ASSETS}", job=str(ROOT / "examples" / "ddp_check.yaml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert verdicts(proc.stdout) == {"head name": "ok", "run directory": "ok", "rendezvous": "ok",
                                     "network floor": "ok", "all-reduce": "ok",
                                     "devices and env": "ok", "isaac assets": "ok"}, proc.stdout
    assert re.search(rf"{ASSETS}/Isaac/IsaacLab readable from node[12], node[12] \(2 entries\)",
                     proc.stdout), proc.stdout
    # The launch's own network floor measurement, without a floor: shown, never failing.
    assert re.search(r"gloo, all-reduce bus bandwidth [\d.]+ Gbit/s across 2 nodes \(floor 0\); "
                     r"no floor set: health\.allreduce_min_gbps", proc.stdout), proc.stdout
    assert re.search(r"'node1' resolves to 10\.231\.0\.11 on node[12], 10\.231\.0\.11 on node[12]",
                     proc.stdout), proc.stdout
    assert re.search(r"gloo, bus bandwidth 1KiB \S+ GB/s, 64KiB .* 8MiB \S+ GB/s", proc.stdout)
    assert "4 ranks on 2 nodes joined (gloo)" in proc.stdout
    assert "doctor-ddp-check" in proc.stdout  # the run is named after the job it checks
    assert "4 ranks, device cpu" in proc.stdout
    assert "OMP_NUM_THREADS=1" in proc.stdout  # the site's env reached the ranks
    assert "all checks passed" in proc.stdout
    assert re.search(r"^scheduler: Slurm 22\.05\.\d+$", proc.stdout, re.M), proc.stdout


def test_doctor_measures_the_network_against_the_jobs_floor(cli, cluster):
    """A floor no network here reaches: the launch stops after the node check, and doctor
    names the measurement and the pair below the floor (two nodes: both)."""
    proc = doctor(cli, cluster, "health.allreduce_min_gbps=100000")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    v = verdicts(proc.stdout)
    assert v["network floor"] == "FAIL" and v["rendezvous"] == "not run", proc.stdout
    assert v["head name"] == "ok" and v["run directory"] == "ok", proc.stdout
    assert re.search(r"network floor: all-reduce bus bandwidth [\d.]+ Gbit/s across 2 nodes, below "
                     r"health\.allreduce_min_gbps=100000, between node1 and node2", proc.stdout), proc.stdout
    assert "check that NCCL uses the fast fabric" in proc.stdout


def test_doctor_names_a_head_name_resolving_to_loopback(cli, cluster):
    subprocess.run(["bash", str(NODE_HOSTS), "node1", "loopback"], check=True)
    try:
        proc = doctor(cli, cluster)
    finally:
        subprocess.run(["bash", str(NODE_HOSTS), "node1", "restore"], check=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    v = verdicts(proc.stdout)
    assert v["head name"] == "FAIL" and v["rendezvous"] == "not run", proc.stdout
    assert v["run directory"] == "ok", proc.stdout
    assert "the head name 'node1' resolves to loopback 127.0.1.1 on node1" in proc.stdout
    assert "set the site's head.mode: interface with head.interface one of" in proc.stdout


def test_doctor_names_a_blocked_rendezvous_port(cli, cluster):
    # node2 may not open TCP connections to node1 on the rendezvous range (a firewall).
    rule = ["ip", "rule", "add", "to", "10.231.0.11", "ipproto", "tcp", "dport", "61000-65534",
            "prohibit", "priority", "100"]
    subprocess.run(["nsenter", NODE2_NET] + rule, check=True)
    try:
        proc = doctor(cli, cluster)
    finally:
        subprocess.run(["nsenter", NODE2_NET, "ip", "rule", "del", "priority", "100"], check=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    v = verdicts(proc.stdout)
    assert v["head name"] == "ok" and v["run directory"] == "ok", proc.stdout
    assert v["rendezvous"] == "FAIL", proc.stdout
    line = next(x for x in proc.stdout.splitlines() if "rendezvous" in x and "FAIL" in x)
    assert "node2" in line, proc.stdout
    assert "port.base/port.span" in proc.stdout


def test_doctor_names_a_run_directory_one_node_cannot_write(cli, cluster, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    # And an Isaac asset root that node2 sees empty (its own mount over it), in the same run.
    assets = tmp_path / "assets"
    (assets / "Isaac" / "IsaacLab" / "Robots").mkdir(parents=True)
    # Read-only for node2 alone: a bind mount in node2's own mount namespace (root ignores modes).
    mount = ["nsenter", NODE2_MNT]
    subprocess.run(mount + ["mount", "--bind", str(runs), str(runs)], check=True)
    subprocess.run(mount + ["mount", "-t", "tmpfs", "tmpfs", str(assets / "Isaac")], check=True)
    try:
        subprocess.run(mount + ["mount", "-o", "remount,bind,ro", str(runs)], check=True)
        proc = doctor(cli, cluster, f"isaaclab_assets={assets}")
    finally:
        subprocess.run(mount + ["umount", str(runs)], check=True)
        subprocess.run(mount + ["umount", str(assets / "Isaac")], check=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    v = verdicts(proc.stdout)
    assert v["run directory"] == "FAIL" and v["head name"] == "ok", proc.stdout
    assert v["rendezvous"] == "not run", proc.stdout
    assert re.search(r"checkpoints not writable from node2: Read-only file system", proc.stdout)
    assert "node1:" not in proc.stdout.split("not writable from")[1].split("\n")[0]
    assert "HPCTRAIN_RUNS_DIR" in proc.stdout
    assert v["isaac assets"] == "FAIL", proc.stdout
    line = next(l for l in proc.stdout.splitlines() if "isaac assets" in l)
    assert f"{assets} (isaaclab_assets): node2: {assets}/Isaac/IsaacLab: No such file" in line, line
    assert "node1" not in line, line

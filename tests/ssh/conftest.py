"""The ssh backend's tests run against the local cluster's real sshds (tests/cluster/README.md):
node5..node7 as a lab's workstations, site locallab."""
from __future__ import annotations

import subprocess

import pytest

from tests.ssh.helpers import CLUSTER_DIR


@pytest.fixture(scope="session")
def lab(cluster) -> str:
    """Site locallab, with an sshd running on the hosts the tests use (a test that stopped one
    starts it again; this makes sure of it at the start)."""
    for host in ("node5", "node6", "node7"):
        # The ip rules these tests add (helpers.ip_rule, priorities 100 and 101), left by a test
        # session that was killed before its `finally` ran: a blocked port 22 fails every test.
        for priority in ("100", "101"):
            subprocess.run(["nsenter", f"--net=/run/netns/hpct-{host}", "ip", "rule", "del",
                            "priority", priority], capture_output=True)
        proc = subprocess.run(["bash", str(CLUSTER_DIR / "node-sshd.sh"), host, "start", "--quiet"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.fail(f"no sshd on {host}: {proc.stderr} (the side nodes are needed: "
                        "HPCTRAIN_CLUSTER_SIDE_NODES >= 3, HPCTRAIN_CLUSTER_SSH_NODES >= every node)")
    return "locallab"


@pytest.fixture
def sites(tmp_path, monkeypatch):
    """A directory of the test's own site profiles, on $HPCTRAIN_SITE_PATH."""
    path = tmp_path / "sites"
    path.mkdir()
    monkeypatch.setenv("HPCTRAIN_SITE_PATH", str(path))
    return path

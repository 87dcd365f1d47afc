"""Bad setups of ssh hosts, each a clear error at submit (exit 2, the site's hosts line, the
fix) before anything starts, and no run directory left behind — against the real sshds."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, submitted
from tests.operate_helpers import job_file
from tests.ssh.helpers import (close_connections, ip_rule, lab_site, leftovers, sshd_stopped,
                               status_of, wait_for)


@pytest.fixture
def job(tmp_path):
    return job_file(tmp_path, "ssh-bad", nodes=2, procs=1, args=["--seconds", "2"])


def refused(cli, tmp_path, job, site, *sets) -> str:
    args = ["submit", job, "--site", site]
    for s in sets:
        args += ["--set", s]
    proc = cli(*args, check=False, timeout=180)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    runs = tmp_path / "runs"
    assert not runs.exists() or not any(runs.rglob("run.json")), "a refused submit left a run"
    return proc.stderr


def test_host_that_does_not_resolve(cli, lab, sites, tmp_path, job):
    site = lab_site(sites, "lab-noname", hosts=["node5", "nosuchhost.invalid"])
    err = refused(cli, tmp_path, job, "lab-noname")
    line = next(i for i, text in enumerate(site.read_text().splitlines(), 1) if text.startswith("hosts:"))
    assert f"error: {site}:{line}: host 'nosuchhost.invalid' does not resolve" in err, err
    assert "fix: check the name in the site's hosts" in err


def test_host_that_refuses_connections(cli, lab, tmp_path, job):
    close_connections()
    with sshd_stopped("node6"):
        err = refused(cli, tmp_path, job, lab)
    assert "node6 refuses ssh connections (ssh: connect to host node6 port 22: Connection refused)" in err, err
    assert "fix: start the ssh server (sshd) on node6" in err


def test_host_whose_ssh_port_is_blocked(cli, lab, sites, tmp_path, job):
    # node6 answers nothing on port 22 (its replies are dropped in its own network namespace).
    close_connections()
    lab_site(sites, "lab-blocked", ssh={**_lab_ssh(), "connect_timeout": 3})
    with ip_rule("node6", ["ipproto", "tcp", "sport", "22", "prohibit"], 101):
        err = refused(cli, tmp_path, job, "lab-blocked")
    assert "node6 did not answer ssh within 3 s" in err and "timed out" in err, err


def test_host_that_rejects_the_key(cli, lab, sites, tmp_path, job):
    key = tmp_path / "not_authorized"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    lab_site(sites, "lab-key", ssh={**_lab_ssh(), "identity": str(key)})
    err = refused(cli, tmp_path, job, "lab-key")
    assert "node5 rejected the ssh login" in err and "Permission denied (publickey)" in err, err
    assert "fix: add your public key to ~/.ssh/authorized_keys on node5" in err


def test_unknown_host_key_with_the_strict_policy(cli, lab, sites, tmp_path, job):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    lab_site(sites, "lab-strict", ssh={**_lab_ssh(), "host_key": "strict",
                                       "known_hosts": str(empty)})
    err = refused(cli, tmp_path, job, "lab-strict")
    assert "the host key of node5 is not known here" in err, err
    assert "ssh.host_key: accept-new" in err


def test_host_without_the_interpreter(cli, lab, tmp_path, job):
    err = refused(cli, tmp_path, job, lab, "python=/opt/no-such-venv/bin/python")
    assert "node5, node6: the interpreter '/opt/no-such-venv/bin/python' (the job's python:) " \
           "is not there" in err, err


def test_port_held_by_another_run(cli, lab, sites, tmp_path, job):
    lab_site(sites, "lab-fixed", port={"fixed": 29555})
    first = job_file(tmp_path, "ssh-holder", nodes=2, procs=1, args=["--seconds", "300"])
    _, holder = submitted(cli("submit", first, "--site", "lab-fixed").stdout)
    try:
        wait_for(lambda: status_of(cli, holder.name)["state"]["state"] == "RUNNING", 120, "running")
        proc = cli("submit", job, "--site", "lab-fixed", check=False, timeout=180)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"node5: port 29555 is held by another hpctrain run: {holder}" in proc.stderr
        assert "fix: cancel that run, or leave port.fixed out of the site" in proc.stderr
    finally:
        cli("cancel", holder.name)
    assert leftovers(holder) == {"node5": [], "node6": []}


def test_run_directory_not_on_a_shared_filesystem(cli, lab, tmp_path, job):
    # This machine writes the run directory on a filesystem of its own (a tmpfs in a mount
    # namespace of the submit's own): the hosts do not see it. Named before anything starts.
    runs = tmp_path / "local-runs"
    runs.mkdir()
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         'mount -t tmpfs none "$1" && shift && exec "$@"', "sh", str(runs),
         sys.executable, "-m", "hpctrain", "submit", str(job), "--site", lab,
         "--set", f"runs_dir={runs}"],
        cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "is not there: the hosts do not share the filesystem it is on" in proc.stderr
    assert "or set the site's sync: rsync" in proc.stderr


def _lab_ssh() -> dict:
    import yaml
    return dict(yaml.safe_load((ROOT / "site_configs" / "locallab.yaml").read_text())["ssh"])

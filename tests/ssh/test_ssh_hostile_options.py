"""The attack of issue 39 against a real sshd: a run record whose ssh line asks for X11
forwarding with XAuthLocation set to a planted program. OpenSSH runs that program only once it
is connected (so the unit tests, which have no server, cannot show it): `hpctrain status` of the
forged run, with DISPLAY set, must refuse the record and never run it. ~1 s, no job."""
from __future__ import annotations

import json

import yaml

from hpctrain.backends.ssh import openssh
from hpctrain.schema.spec import SshOptions
from tests.conftest import ROOT

RUN_ID = "20240101-000000-abcd"


def test_a_forged_x11_record_runs_nothing_against_a_real_sshd(cli, lab, tmp_path):
    canary = tmp_path / "CANARY"
    program = tmp_path / "xauth"
    program.write_text(f"#!/bin/sh\ntouch {canary}\n")
    program.chmod(0o755)
    ssh = yaml.safe_load((ROOT / "site_configs" / "locallab.yaml").read_text())["ssh"]
    words = openssh.ssh_words(SshOptions(**ssh))
    # Where a site's own options go: first, so that ssh keeps these values.
    forged = [words[0], "-o", "ForwardX11=yes", "-o", f"XAuthLocation={program}", *words[1:]]
    d = tmp_path / "runs" / "x" / RUN_ID
    (d / "status").mkdir(parents=True)
    (d / "logs").mkdir()
    (d / "run.json").write_text(json.dumps({
        "run_id": RUN_ID, "name": "x", "site": lab, "backend": "ssh", "job_id": "node5:1",
        "pid": 1, "state": "RUNNING", "script": "job.sh",
        "ssh": {"hosts": ["node5"], "ssh": forged, "sync": "shared", "connect_timeout": 5}}))
    proc = cli("status", d, check=False, timeout=60, env={"DISPLAY": ":0"})
    assert not canary.exists(), "the planted XAuthLocation program ran"
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"error: {d / 'run.json'}: 'ssh.ssh': the option "
                                  "'ForwardX11=yes' is refused"), proc.stderr

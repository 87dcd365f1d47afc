"""Hostile run directories through the real CLI (issue 27): a run.json whose login-node or
ssh-host section would run a command, a named pipe as run.json, an unknown backend — `status`,
`list`, `logs` and `cancel` answer with an error naming the file and the key (exit 2), or list
the run with that reason, and the canary a command would create never appears.
The in-process classes with many more variants are tests/unit/test_hostile_untrusted.py."""
from __future__ import annotations

import json
import os

import pytest

from tests.hostile import tried

RUN_ID = "20240101-000000-abcd"


def _variants(canary: str) -> dict[str, dict]:
    ok = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR",
          "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4",
          "-o", "StrictHostKeyChecking=yes"]  # what submit writes for a default ssh: section
    return {
        "remote ssh is sh -c": {"backend": "slurm", "job_id": "12",
                                "remote": {"login": "h", "ssh": ["sh", "-c", f"touch {canary}"],
                                           "path": "/r"}},
        "remote ProxyCommand": {"backend": "slurm", "job_id": "12",
                                "remote": {"login": "h", "path": "/r",
                                           "ssh": [*ok, "-o", f"ProxyCommand=touch {canary}"]}},
        "remote login option": {"backend": "slurm", "job_id": "12",
                                "remote": {"login": f"-oProxyCommand=touch {canary}", "ssh": ok,
                                           "path": "/r"}},
        "ssh LocalCommand": {"backend": "ssh", "job_id": "h:1", "pid": 1,
                             "ssh": {"hosts": ["h"], "ssh": [*ok, "-o", "PermitLocalCommand=yes",
                                                             "-o", f"LocalCommand=touch {canary}"]}},
        "ssh host option": {"backend": "ssh", "job_id": "h:1", "pid": 1,
                            "ssh": {"hosts": [f"-oProxyCommand=touch {canary}"], "ssh": ok}},
        "unknown backend": {"backend": "pbs"},
        "array of 10^9": {"array_size": 10**9},
    }


@pytest.mark.parametrize("variant", sorted(_variants("C")))
def test_hostile_records_run_nothing_through_the_cli(variant, cli, tmp_path, home):
    canary = tmp_path / "CANARY"
    rec = dict(run_id=RUN_ID, name="bad", site="x", backend="local", job_id="local-1",
               state="RUNNING", script="job.sh")
    rec.update(_variants(str(canary))[variant])
    d = tmp_path / "runs" / "bad" / RUN_ID
    (d / "status").mkdir(parents=True)
    (d / "logs").mkdir()
    (d / "run.json").write_text(json.dumps(rec))
    home.mkdir(parents=True, exist_ok=True)
    (home / "runs.jsonl").write_text(json.dumps({"run_id": RUN_ID, "path": str(d), "name": "bad"})
                                     + "\n")
    for args in (["status", str(d)], ["logs", str(d)], ["cancel", str(d)], ["status", "--json", str(d)]):
        tried("records")
        proc = cli(*args, check=False, timeout=60)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert proc.stderr.startswith("error: ") and "run.json" in proc.stderr, proc.stderr
        assert "unexpectedly" not in proc.stderr and "Traceback" not in proc.stderr
    # pull reads only the record's `remote` section (a run of another backend is a directory
    # here): it copies, or refuses naming run.json; it never runs what a record says.
    tried("records")
    pulled = cli("pull", str(d), "--to", tmp_path / "got", check=False, timeout=60)
    assert pulled.returncode in (0, 2) and "Traceback" not in pulled.stderr, pulled.stderr
    assert "unexpectedly" not in pulled.stderr
    assert pulled.returncode == 0 or "run.json" in pulled.stderr, pulled.stderr
    assert pulled.returncode == 2 or "remote" not in rec, pulled.stdout
    tried("records")
    listed = cli("list", check=False, timeout=60)
    assert listed.returncode == 0 and "bad" in listed.stdout, listed.stdout + listed.stderr
    assert not canary.exists()


def test_a_named_pipe_as_run_json_is_an_error_not_a_hang(cli, tmp_path, home):
    d = tmp_path / "runs" / "p" / RUN_ID
    d.mkdir(parents=True)
    os.mkfifo(d / "run.json")
    for args in (["status", str(d)], ["logs", str(d)], ["cancel", str(d)]):
        tried("fifos")
        proc = cli(*args, check=False, timeout=30)
        assert proc.returncode == 2 and "named pipe" in proc.stderr, proc.stderr

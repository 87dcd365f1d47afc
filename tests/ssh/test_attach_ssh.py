"""`hpctrain attach` on an ssh site (issue 32, item 3): a shell on a running job's second host
through a real pseudo-terminal, and every rank's stack with the job going on."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pexpect
import pytest

from tests.conftest import ROOT, submitted
from tests.operate_helpers import job_file
from tests.ssh.helpers import wait_for


@pytest.fixture(scope="module")
def running(lab, tmp_path_factory):
    """One 2-host x 2-rank job that runs while the tests look into it (found by its run
    directory: each test has a home of its own)."""
    from tests.conftest import Cli
    tmp = tmp_path_factory.mktemp("attach-ssh")
    jf = job_file(tmp, "attach-ssh", nodes=2, procs=2, args=["--seconds", "120"])
    env = {"HPCTRAIN_HOME": str(tmp / "home"), "HPCTRAIN_RUNS_DIR": str(tmp / "runs")}
    _, run_dir = submitted(Cli()("submit", str(jf), "--site", lab, env=env).stdout)
    logs = run_dir / "logs"
    wait_for(lambda: len(list(logs.glob("rank-*.log"))) == 4
             and len(list((run_dir / "status").glob("rank-*.json"))) == 4
             and all("step 1 of" in p.read_text() for p in logs.glob("rank-*.log")), 90,
             "4 ranks running")
    yield run_dir, env
    Cli()("cancel", str(run_dir), env=env, check=False)


def test_attach_reaches_the_second_host(running, home):
    run_dir, _ = running
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    child = pexpect.spawn(sys.executable, ["-m", "hpctrain", "attach", str(run_dir), "--rank", "3"],
                          cwd=str(ROOT), env=env, encoding="utf-8", timeout=60)
    child.logfile_read = sys.stdout
    child.sendline('echo "A""T=$(hostname)|$PWD"')
    child.expect(r"AT=(\S+)\|(\S+)\r\n")
    assert child.match.groups() == ("node6", str(run_dir))  # rank 3: the second host's
    child.sendline("exit")
    child.expect(pexpect.EOF)


def test_stacks_on_every_host_and_the_job_goes_on(running, cli):
    run_dir, env = running
    out = cli("attach", str(run_dir), "--stacks", timeout=90).stdout
    sections = re.split(r"^--- rank (\d) on (node\d) \(pid \d+\)$", out, flags=re.M)
    assert [int(r) for r in sections[1::3]] == [0, 1, 2, 3], out
    assert sections[2::3] == ["node5", "node5", "node6", "node6"], out
    for text in sections[3::3]:
        assert re.search(r'^  File ".*worker\.py", line \d+ in main$', text, re.M), out
    before = {p.name: p.read_text().count("step ") for p in (run_dir / "logs").glob("rank-*.log")}
    wait_for(lambda: all(p.read_text().count("step ") > before[p.name]
                         for p in (run_dir / "logs").glob("rank-*.log")), 30,
             "every rank to go on after its dump")
    state = cli("status", str(run_dir), "--json", env=env).stdout
    assert '"RUNNING"' in state

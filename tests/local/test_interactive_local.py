"""`hpctrain shell` on the local site, through a real pseudo-terminal: a shell here with the
job's environment, `hpctrain launch` runs the job script in it, and the shell ends with hpctrain.
`hpctrain attach` on a running local run: a shell in its run directory, and every rank's stack
(`--stacks`: the run's own copy of the rank side, under the job's interpreter)."""
from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import pexpect

from tests.conftest import ROOT
from tests.operate_helpers import job_file, results
from tests.slurm.survive import wait_until

PROMPT = re.compile(r"\[(?P<name>[a-z0-9-]+)\] [^\r\n]*[$#] ")


def spawn(*args: str) -> pexpect.spawn:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    child = pexpect.spawn(sys.executable, ["-m", "hpctrain", *args], cwd=str(ROOT), env=env,
                          encoding="utf-8", timeout=60, dimensions=(40, 200))
    child.logfile_read = sys.stdout  # what the terminal showed, in a failure's report
    return child


def test_local_shell_launches_the_job_here_and_ends_with_hpctrain(cli, tmp_path):
    jf = job_file(tmp_path, "here", procs=2, args=["--seconds", "1"])
    child = spawn("shell", str(jf), "--site", "local")
    child.expect(r"run directory: (\S+)\r\n")
    run_dir = Path(child.match.group(1))
    child.expect(PROMPT)
    assert child.match.group("name") == "here"
    child.sendline('echo "V""=$HPCTRAIN_RUN_DIR|$HPCTRAIN_HEAD|$PWD"')
    child.expect(r"V=(\S+)\|(\S+)\|(\S+)\r\n")
    assert child.match.groups() == (str(run_dir), "localhost", str(run_dir / "code"))
    child.expect(PROMPT)
    child.sendline('hpctrain launch; echo launch-status"=$?"')
    child.expect(r"launch-status=(\d+)", timeout=120)
    assert child.match.group(1) == "0"
    assert sorted(r["rank"] for r in results(run_dir)) == [0, 1]
    assert cli("status", str(run_dir)).stdout.count("COMPLETED") >= 1
    child.expect(PROMPT)

    # Outside its shell, `launch` refuses (a shell of another run, or none at all).
    outside = cli("launch", str(run_dir), check=False)
    assert outside.returncode == 2 and "runs inside run" in outside.stderr

    shell_pid = int((run_dir / "status" / "allocation").read_text().split("-")[1])
    os.kill(child.pid, signal.SIGKILL)  # hpctrain killed: its shell is hung up, not left behind
    wait_until(lambda: not os.path.exists(f"/proc/{shell_pid}")
               or "Z" in Path(f"/proc/{shell_pid}/stat").read_text().rsplit(")", 1)[1].split()[0],
               30, "the shell to end with hpctrain")
    child.close(force=True)


def test_local_attach_opens_a_shell_and_shows_every_ranks_stack(cli, tmp_path):
    jf = job_file(tmp_path, "peek", procs=2, args=["--seconds", "60"])
    out = cli("submit", jf, "--site", "local", cwd=tmp_path).stdout
    run_dir = Path(re.search(r"run directory: (\S+)", out).group(1))
    try:
        wait_until(lambda: len(list((run_dir / "status").glob("rank-[0-9].json"))) == 2, 60,
                   "both ranks to start")
        said = cli("attach", str(run_dir), "--stacks").stdout
        assert said.count("--- rank ") == 2, said
        # Each rank is in the worker's loop, called through the run's own bootstrap.
        assert len(re.findall(r'File ".*worker\.py", line \d+ in main', said)) == 2, said
        assert f'File "{run_dir}/rank/before/bootstrap.py"' in said, said

        child = spawn("attach", str(run_dir))
        child.sendline('echo "W""=$PWD"; exit')
        child.expect(r"W=(\S+)\r\n")
        assert child.match.group(1) == str(run_dir)
        child.expect(pexpect.EOF)
    finally:
        cli("cancel", str(run_dir), check=False)

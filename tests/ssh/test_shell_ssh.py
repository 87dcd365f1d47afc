"""`hpctrain shell` on an ssh site (issue 32, item 2), through a real pseudo-terminal: a shell on
the first host (ssh -t) with the job's environment, `hpctrain launch` in it runs the job across
the hosts, and the shell ends with its terminal."""
from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path

import pexpect

from tests.conftest import ROOT
from tests.operate_helpers import job_file, results
from tests.ssh.helpers import wait_for

PROMPT = re.compile(r"\[(?P<name>[a-z0-9-]+)\] (?P<host>node\d):[^\r\n]*[$#] ")


def spawn(*args: str) -> pexpect.spawn:
    child = pexpect.spawn(sys.executable, ["-m", "hpctrain", *args], cwd=str(ROOT),
                          encoding="utf-8", timeout=60, dimensions=(40, 200))
    child.logfile_read = sys.stdout  # what the terminal showed, in a failure's report
    return child


def gone(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_shell_on_the_first_host_launches_the_job_on_every_host(cli, lab, tmp_path, home):
    jf = job_file(tmp_path, "lab-shell", nodes=2, procs=1, args=["--seconds", "1"])
    child = spawn("shell", str(jf), "--site", lab)
    child.expect(r"run directory: (\S+)\r\n")
    run_dir = Path(child.match.group(1))
    child.expect(PROMPT)
    assert (child.match.group("name"), child.match.group("host")) == ("lab-shell", "node5")
    child.sendline('echo "V""=$HPCTRAIN_RUN_DIR|$HPCTRAIN_HEAD|$PWD|$(type -t hpctrain)"')
    child.expect(r"V=(\S+)\|(\S+)\|(\S+)\|(\S+)\r\n")
    # The host's PATH (ssh passes none of this one's) has no hpctrain: the shell's own launch.
    assert child.match.groups() == (str(run_dir), "node5", str(run_dir / "code"), "function")
    child.expect(PROMPT)
    rec = wait_for(lambda: (r := json.loads((run_dir / "run.json").read_text())).get("job_id") and r,
                   10, "the shell's id in run.json")
    assert re.fullmatch(r"node5:\d+", rec["job_id"]) and rec["pid"] == int(rec["job_id"][6:]), rec
    assert json.loads(cli("status", str(run_dir), "--json").stdout)["state"]["state"] == "RUNNING"

    child.sendline('hpctrain launch; echo launch-status"=$?"')
    child.expect(r"launch-status=(\d+)", timeout=120)
    log = (run_dir / "logs" / "job.out").read_text() if (run_dir / "logs" / "job.out").exists() else ""
    assert child.match.group(1) == "0", log
    got = results(run_dir)
    assert sorted(r["rank"] for r in got) == [0, 1] and {r["host"] for r in got} == {"node5", "node6"}
    child.expect(PROMPT)

    child.sendline("exit")
    child.expect(r"shell ended \(status 0\)")
    child.expect(pexpect.EOF)
    assert gone(rec["pid"])


def test_a_killed_hpctrain_hangs_up_the_hosts_shell(lab, tmp_path, home):
    jf = job_file(tmp_path, "lab-kill", nodes=1, procs=1)
    child = spawn("shell", str(jf), "--site", lab)
    child.expect(r"run directory: (\S+)\r\n")
    run_dir = Path(child.match.group(1))
    child.expect(PROMPT)
    shell_pid = int((run_dir / "status" / "allocation").read_text().strip().split(":")[1])
    assert not gone(shell_pid)
    os.kill(child.pid, signal.SIGKILL)  # its ssh gets SIGHUP from the kernel; sshd hangs up bash
    wait_for(lambda: gone(shell_pid), 30, "the host's shell to end with hpctrain")
    child.close(force=True)

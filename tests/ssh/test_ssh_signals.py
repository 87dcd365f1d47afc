"""A signal to an ssh-hosts job is handled as on the local site (issue 28, item 1): TERM, INT or
HUP to the batch shell, or TERM to one host's torchrun, reaches the ranks on every host, which
save at the next iteration boundary; nothing of the run is left on any host; the run ends
STOPPED with what was saved and the `submit --resume` hint, which continues it. Real rsl-rl
trainings on two of the local cluster's sshd hosts (site locallab), one run per behaviour."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, submitted
from tests.ssh.helpers import job_log, leftovers, on_host, status_of, wait_done, wait_for

UPDATES = 200


def _training(cli, lab, updates=UPDATES) -> Path:
    proc = cli("submit", ROOT / "examples/rl/rsl_rl_pendulum.yaml", "--site", lab,
               "--set", "resources.procs_per_node=1", "--set", f"python={sys.executable}",
               "--set", f"args=[--updates,{updates},--save-interval,1000,--sleep,0.3,"
                        "--num-envs,8,--steps,16]",
               cwd=ROOT)
    _, run_dir = submitted(proc.stdout)
    wait_for(lambda: any(json.loads(p.read_text()).get("step", 0) >= 3
                         for p in run_dir.glob("status/progress-*.json")), 240, "iteration 3")
    return run_dir


def _stopped(cli, run_dir: Path, sig: str) -> tuple[dict, dict]:
    st = wait_done(cli, run_dir.name, timeout=240)
    log = job_log(run_dir)
    assert st["state"]["state"] == "STOPPED", (st, log[-4000:])
    assert st["state"]["exit_code"] == 128 + {"TERM": 15, "INT": 2, "HUP": 1}[sig], st
    stopped = json.loads((run_dir / "status" / "stopped.json").read_text())
    assert stopped["signal"] == sig and Path(stopped["saved"]).is_file(), stopped
    reason = st["state"]["reason"]
    assert f"(SIG{sig}) at iteration {stopped['step']}, saved " in reason, reason
    assert f"continue with: hpctrain submit --resume {run_dir}" in reason
    # Both hosts' ranks stopped at that iteration (rsl-rl's learn() returned there).
    reached = {a["host"]: a["reached"] for a in map(json.loads, (run_dir / "results" / "attempts.jsonl")
                                                     .read_text().splitlines())}
    assert reached == {"node5": stopped["step"], "node6": stopped["step"]}, reached
    # No traceback for the signal torchrun was sent. torch's elastic agent on a host whose peer
    # (the head, which holds the rendezvous store) finished first logs its failed exit barrier
    # with the store error's traceback (agent/server/api.py, "Error waiting on exit barrier"):
    # a shutdown race between hosts inside torchrun, not a signal's traceback; it is left out.
    shown = "\n".join(line for line in log.splitlines()
                       if "torch/distributed/elastic/agent/server/api.py:" not in line)
    assert "SignalException" not in log, log[-4000:]
    assert "Traceback" not in shown, shown[-4000:]
    assert leftovers(run_dir) == {"node5": [], "node6": []}
    return st, stopped


# HUP, what a closed terminal sends: TERM and INT reach the same handler of the batch shell
# (`trap 'on_stop SIG' SIG`, golden files), and TERM's real path over ssh runs below (to one
# host's torchrun) and on the local site (tests/local/test_local_signals.py).
@pytest.mark.parametrize("sig", ["HUP"])
def test_a_signal_to_the_batch_shell_saves_on_every_host(cli, lab, sig):
    run_dir = _training(cli, lab)
    pid = (run_dir / "status" / "pid").read_text().strip()
    assert on_host("node5", f"kill -{sig} {int(pid)}").returncode == 0
    _stopped(cli, run_dir, sig)
    log = job_log(run_dir)
    assert f"SIG{sig}: passed to torchrun on every host as SIGTERM" in log, log[-3000:]
    # node6's torchrun is signalled while its ranks run; ranks that already stopped with node5's
    # (they agree on the iteration to stop at) leave their torchrun to finish by itself.
    assert ("hpctrain term: node6: SIGTERM to torchrun" in log
            or "hpctrain term: node6: the ranks have ended; torchrun is finishing" in log), log[-3000:]


def test_term_to_one_hosts_torchrun_stops_the_run_and_it_resumes(cli, lab):
    # What a user's kill of torchrun on node6 does: node6's ranks get it from their torchrun,
    # node5's from the batch shell; all save at one iteration. Then the hint, as typed.
    run_dir = _training(cli, lab, updates=14)
    rank = next(json.loads(p.read_text()) for p in run_dir.glob("status/rank-*.json")
                if json.loads(p.read_text())["node"] == "node6")
    agent = on_host("node6", f"ps -o ppid= -p {int(rank['pid'])}").stdout.strip()
    assert agent.isdigit() and "rank" in on_host("node6", f"cat /proc/{agent}/cmdline").stdout
    assert on_host("node6", f"kill -TERM {agent}").returncode == 0
    st, stopped = _stopped(cli, run_dir, "TERM")
    log = job_log(run_dir)
    assert "node6: torchrun ended on a signal (status 143): passing SIGTERM on to every host" in log
    assert "torchrun was sent SIGTERM" in log
    # node5's torchrun, its ranks done, waits in its exit barrier for node6's, which is gone:
    # ended once every rank has, not a minute on.
    assert "the ranks have ended on every host: ending the torchrun" in log, log[-3000:]
    assert "did not end within 60 s" not in log

    hint = st["state"]["reason"].split("continue with: ", 1)[1].split()
    again = cli(*hint[1:], "--wait", timeout=400)
    assert "resumed " in again.stdout, again.stdout
    st = status_of(cli, run_dir.name)
    assert st["state"]["state"] == "COMPLETED", (st, job_log(run_dir)[-3000:])
    attempts = [json.loads(line) for line in
                (run_dir / "results" / "attempts.jsonl").read_text().splitlines()][2:]
    assert sorted(a["host"] for a in attempts) == ["node5", "node6"], attempts
    for a in attempts:
        assert a["resume_from"] == stopped["saved"] and a["started_from"] == stopped["step"], a
        assert a["reached"] == 13, a
    assert leftovers(run_dir) == {"node5": [], "node6": []}

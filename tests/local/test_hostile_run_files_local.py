"""Hostile run files through the real CLI on this machine (issue 39, items 3, 4 and 7): `cancel`
of a live local run with a named pipe at status/pid answers (it hung), and `report` never writes
through a planted link or pipe and writes the format its --out names. The in-process classes,
with every path, are tests/unit/test_hostile_run_files.py."""
from __future__ import annotations

import json
import os
import subprocess

from tests.hostile import tried

RUN_ID = "20240101-000000-abcd"


def _run_dir(tmp_path, home, **fields):
    d = tmp_path / "runs" / "x" / RUN_ID
    (d / "status").mkdir(parents=True)
    (d / "logs").mkdir()
    (d / "usage").mkdir()
    rec = dict(run_id=RUN_ID, name="x", site="local", backend="local", job_id="local-1",
               state="RUNNING", script="job.sh")
    rec.update(fields)
    (d / "run.json").write_text(json.dumps(rec))
    lines = [{"kind": "start", "time": 1000.0, "node": "n"}]
    lines += [{"t": 1000.0 + i, "g": [[0, 50.0 + i]]} for i in range(5)]
    (d / "usage" / "n.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return d


def test_cancel_with_a_pipe_at_status_pid_answers(cli, tmp_path, home):
    # A live process of this test's as the run's recorded one (not its job shell): cancel looks
    # for the run's processes, reading status/pid, where a named pipe waits.
    sleeper = subprocess.Popen(["sleep", "120"])
    try:
        with open(f"/proc/{sleeper.pid}/stat") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
        d = _run_dir(tmp_path, home, job_id=f"local-{sleeper.pid}", pid=sleeper.pid,
                     pid_start=start)
        os.mkfifo(d / "status" / "pid")
        tried("fifos")
        proc = cli("cancel", str(d), check=False, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr and sleeper.poll() is None  # not the run's: kept
    finally:
        sleeper.kill()
        sleeper.wait()


def test_report_writes_no_link_no_pipe_and_the_format_asked(cli, tmp_path, home):
    d = _run_dir(tmp_path, home, state="COMPLETED", final=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    (d / "plots").symlink_to(victim, target_is_directory=True)
    tried("links")
    proc = cli("report", str(d), check=False, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("error: "), proc.stderr
    assert "symbolic link" in proc.stderr and not list(victim.iterdir())
    (d / "plots").unlink()
    (d / "plots").mkdir()
    os.mkfifo(d / "plots" / "usage.png")
    tried("fifos")
    proc = cli("report", str(d), check=False, timeout=60)
    assert proc.returncode == 2 and "named pipe" in proc.stderr and "None" not in proc.stderr
    out = tmp_path / "usage.pdf"
    cli("report", str(d), "--out", str(out), timeout=60)
    assert out.read_bytes().startswith(b"%PDF")
    proc = cli("report", str(d), "--out", str(tmp_path / "usage.doc"), check=False, timeout=60)
    assert proc.returncode == 2 and ".doc" in proc.stderr and ".svg" in proc.stderr, proc.stderr

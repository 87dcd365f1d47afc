"""The ssh batch shell's `failure_cause`, run from the rendered script (its golden file, which
tests/unit/test_render.py holds equal to the renderer's output) on a run directory in the state
the ranks and torchruns left it: which rank a launch failure is blamed on."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "ssh-2x2.sh"


def summary(title: str, host: str, rank: int, local_rank: int, code: int, name: str) -> str:
    """One entry of torchrun's error summary, as torch 2.13 prints it."""
    return f"""{title}
[0]:
  time      : 2026-11-27_00:02:44
  host      : {host}
  rank      : {rank} (local_rank: {local_rank})
  exitcode  : {code} (pid: {4000 + rank})  ({name})
  error_file: <N/A>
  traceback : Signal {-code} ({name}) received by PID {4000 + rank}
"""


def report(host: str, cause: tuple, other: tuple) -> str:
    return ("=" * 60 + "\n" + summary("Failures:", host, *other) + "-" * 60 + "\n"
            + summary("Root Cause (first observed failure):", host, *cause) + "=" * 60 + "\n")


def failure_cause(run_dir: Path) -> str:
    script = GOLDEN.read_text()
    start = script.index("\nfailure_cause() {\n")
    function = script[start:script.index("\n}\n", start) + 3]
    proc = subprocess.run(["bash", "-c", function + "failure_cause", "failure_cause"],
                          env={"RUN_DIR": str(run_dir), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def run_after_a_sigkill(tmp_path: Path) -> Path:
    """Rank 3 (node2) was SIGKILLed. Ranks 0-2 lost it: each wrote its note (a gloo error), and
    rank 0 then aborted at exit (SIGABRT, the gloo group left open). node1's step failed first."""
    run = tmp_path / "run"
    (run / "status").mkdir(parents=True)
    (run / "logs").mkdir()
    for rank in range(4):
        node = "node1" if rank < 2 else "node2"
        (run / "status" / f"rank-{rank}.json").write_text(json.dumps({"rank": rank, "node": node}))
        if rank < 3:
            (run / "status" / f"rank-{rank}.failed.json").write_text(json.dumps(
                {"rank": rank, "node": node, "exit_status": 1,
                 "error": "RuntimeError: Connection closed by peer"}))
    (run / "status" / "first-failed-host").write_text("node1 1\n")
    (run / "logs" / "job.out").write_text(
        "[rank 0] RuntimeError: Connection closed by peer\n"
        + report("node1", (0, 0, -6, "SIGABRT"), (1, 1, -15, "SIGTERM"))
        + report("node2", (3, 1, -9, "SIGKILL"), (2, 0, -15, "SIGTERM")))
    return run


def test_the_rank_a_signal_killed_without_a_note_is_the_cause(tmp_path):
    # (CI saw this: the abort of a rank that had said why it failed was taken for the cause)
    run = run_after_a_sigkill(tmp_path)
    assert failure_cause(run) == (
        "rank 3 on node2 was killed: Signal 9 (SIGKILL) received by PID 4003 (torchrun's report; "
        "the ranks that lost it failed after it)")


def test_a_killed_rank_on_the_host_that_failed_first_comes_before_others(tmp_path):
    run = run_after_a_sigkill(tmp_path)
    (run / "status" / "rank-0.failed.json").unlink()  # rank 0 died of the signal, saying nothing
    assert failure_cause(run).startswith("rank 0 on node1 was killed: Signal 6 (SIGABRT)")


def test_no_report_and_no_note_names_the_host(tmp_path):
    run = run_after_a_sigkill(tmp_path)
    (run / "logs" / "job.out").write_text("")
    for note in (run / "status").glob("rank-*.failed.json"):
        note.unlink()
    assert failure_cause(run) == (
        "the step on node1 failed first (status 1), and no rank recorded an error: see logs/job.out")

"""Issue 29, item 6, on this machine with the real torchrun and gloo: rank 1 sleeps before the
all-reduce rank 0 waits in, nobody reports progress; the hang watcher asks both for their flight
recorder's dump and ends them (their stacks dumped to their logs), and the failure record names
rank 1, whose last collective lags rank 0's (issue 40)."""
from __future__ import annotations

import sys

import yaml

from tests.conftest import ROOT, submitted
from tests.operate_helpers import wait_state


def test_the_rank_not_in_the_collective_is_named(cli, tmp_path):
    job = tmp_path / "late.yaml"
    job.write_text(yaml.safe_dump({
        "name": "late", "library": "command", "script": str(ROOT / "tests/programs/late_rank.py"),
        "python": sys.executable, "resources": {"procs_per_node": 2},
        "launcher": {"hang_timeout": 10}}))
    job_id, run_dir = submitted(cli("submit", job).stdout)
    st = wait_state(cli, run_dir.name, {"FAILED", "COMPLETED"}, timeout=120)
    assert st["state"]["state"] == "FAILED", st
    assert st["ended"].startswith("hang: rank 1 on ") and "(at late_rank.py:" in st["ended"], st
    # PyTorch's flight recorder, asked by the watcher (rank/flight.py), tells it first.
    assert ("held the others (flight recorder): its last collective in process group 0 was #1; "
            "rank(s) 0 wait in #2 (gloo:all_reduce). ") in st["ended"], st
    text = cli("status", run_dir.name).stdout
    assert "ended     hang: rank 1 on " in text, text

"""Issue 29, item 6, on this machine with the real torchrun and gloo: rank 1 sleeps before the
all-reduce rank 0 waits in, nobody reports progress; the hang watcher ends both (their stacks
dumped to their logs), and the failure record names rank 1, the one not in the all-reduce."""
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
    assert "not in the all_reduce that rank(s) 0 waited in" in st["ended"], st
    text = cli("status", run_dir.name).stdout
    assert "ended     hang: rank 1 on " in text, text

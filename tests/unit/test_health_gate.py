"""Issue 40, items 1 and 5: a node that fails its check is a failure, never a stop; the health
gate judges the job's own GPUs (the rows of the real H100 output, tests/fixtures/nvidia-smi)
and fails closed where nvidia-smi is missing or lacks a field it needs."""
from __future__ import annotations

import json

from hpctrain.rank import ending


def _stop_note(run_dir, rank=0):
    status = run_dir / "status"
    status.mkdir(exist_ok=True)
    (status / f"stop-{rank}.json").write_text(json.dumps({"rank": rank, "signal": "TERM"}))


def test_a_stop_is_a_stop_without_a_failed_node(tmp_path):
    _stop_note(tmp_path)
    assert ending.stopped(str(tmp_path), "TERM", 143) == 0
    assert (tmp_path / "status" / "stopped.json").exists()


def test_a_node_that_failed_its_check_wins_over_the_stop_its_teardown_caused(tmp_path):
    _stop_note(tmp_path)
    (tmp_path / "status" / "preflight-failed-node2.txt").write_text(
        "node2 failed the health gate: GPU 2: 3 uncorrected volatile ECC error(s)\n")
    assert ending.stopped(str(tmp_path), "TERM", 143) == 1
    assert not (tmp_path / "status" / "stopped.json").exists()

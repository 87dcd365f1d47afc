"""A study's later trials in one worker's allocation rely on the health gate and network floor
an earlier trial passed on the same nodes (issue 41 item 7: what belongs to the allocation is
done once per allocation), and say so in their own records; the first trial, a trial whose
earlier verdict failed or is missing, or a different node set, runs the checks."""
import json
import os

import pytest

from hpctrain.rank.before import health, netfloor, preflight
from hpctrain.search.allocation import progress_stamp, ranks_started


@pytest.fixture
def study(tmp_path, monkeypatch):
    for n in ("0000", "0001"):
        (tmp_path / "trials" / n / "status" / "health").mkdir(parents=True)
        (tmp_path / "trials" / n / "bootstrap.json").write_text(
            json.dumps({"health": {"expected_gpus": 4}, "netfloor": {"min_gbps": 10}}))
    monkeypatch.setenv("HPCTRAIN_RUN_DIR", str(tmp_path / "trials" / "0001"))
    monkeypatch.setenv("HPCTRAIN_NODES", "node1,node2")
    monkeypatch.setenv("SLURM_NODEID", "0")
    monkeypatch.setenv("HPCTRAIN_NODES_CHECKED", "trials/0000")
    return tmp_path


def _verdict(node="node1", ok=True):
    return {"node": node, "ok": ok, "driver": "550.1", "gpus": [{"index": 0}], "problems":
            [] if ok else ["gpu 0 fell off the bus"], "notes": [], "time": 1.0, "seconds": 0.8}


def _ran(monkeypatch):
    ran = []
    monkeypatch.setattr(health, "gate", lambda cfg, node: ran.append(node) or _verdict(node))
    return ran


def test_the_earlier_trial_is_named_by_the_worker_and_checked(study, monkeypatch):
    assert preflight.earlier_trial() == ("trials/0000", str(study / "trials" / "0000"))
    for bad in ("", "../x", "trials/12", "trials/0000/../../x", "trials/0001"):
        monkeypatch.setenv("HPCTRAIN_NODES_CHECKED", bad)
        assert preflight.earlier_trial() is None, bad


def test_a_passed_health_verdict_of_this_allocation_is_relied_on_and_recorded(study, monkeypatch):
    ran = _ran(monkeypatch)
    (study / "trials/0000/status/health/node1.json").write_text(json.dumps(_verdict()))
    verdict, _ = preflight._health_gate("node1")
    assert ran == [] and verdict["ok"] and verdict["relied_on"] == "trials/0000"
    kept = json.loads((study / "trials/0001/status/health/node1.json").read_text())
    assert kept["relied_on"] == "trials/0000" and "not run again" in kept["notes"][0]
    assert kept["gpus"] == [{"index": 0}] and kept["seconds"] == 0.0


@pytest.mark.parametrize("earlier", [
    None, _verdict(ok=False), _verdict(node="node2"), {"ok": True, "node": "node1"}, [1]])
def test_otherwise_the_gate_runs(study, monkeypatch, earlier):
    ran = _ran(monkeypatch)
    if earlier is not None:
        (study / "trials/0000/status/health/node1.json").write_text(json.dumps(earlier))
    verdict, _ = preflight._health_gate("node1")
    assert ran == ["node1"] and "relied_on" not in verdict


def test_the_first_trial_runs_the_gate(study, monkeypatch):
    ran = _ran(monkeypatch)
    (study / "trials/0000/status/health/node1.json").write_text(json.dumps(_verdict()))
    monkeypatch.delenv("HPCTRAIN_NODES_CHECKED")
    preflight._health_gate("node1")
    assert ran == ["node1"]


@pytest.mark.parametrize("record, kept", [
    ({"passed": True, "nodes": ["node1", "node2"], "floor_gbps": 10}, True),
    ({"passed": True, "nodes": ["node1", "node2"], "floor_gbps": 20}, True),
    ({"passed": True, "nodes": ["node1", "node3"], "floor_gbps": 10}, False),
    ({"passed": True, "nodes": ["node1", "node2"], "floor_gbps": 5}, False),
    ({"passed": False, "nodes": ["node1", "node2"], "floor_gbps": 10}, False),
    (None, False),
])
def test_the_network_floor_is_measured_again_unless_it_held_on_these_nodes(study, monkeypatch,
                                                                           record, kept):
    measured = []
    monkeypatch.setattr(netfloor, "run", lambda settings: measured.append(1) or 0)
    if record is not None:
        (study / "trials/0000/status" / netfloor.RESULT).write_text(json.dumps(record))
    marks = {}
    assert preflight._network_floor(marks) == 0
    assert measured == ([] if kept else [1])
    mine = study / "trials/0001/status" / netfloor.RESULT
    assert mine.exists() == kept
    if kept:
        assert json.loads(mine.read_text())["relied_on"] == "trials/0000" and marks["floor_s"] == 0.0


def test_the_worker_names_a_trial_whose_ranks_started_in_this_attempt(tmp_path):
    (tmp_path / "status").mkdir()
    assert progress_stamp(tmp_path) is None and not ranks_started(tmp_path, None)
    p = tmp_path / "status" / "progress-0.json"
    p.write_text("{}")
    os.utime(p, (1000, 1000))  # an earlier attempt's report, left as it was
    earlier = progress_stamp(tmp_path)
    assert ranks_started(tmp_path, None) and not ranks_started(tmp_path, earlier)
    # This attempt's rank 0 reports, even within the same clock tick (a new file, as the rank
    # side's atomic write makes, or the same file written again).
    os.utime(p, ns=(1000 * 10**9, 1000 * 10**9 + 1))
    assert ranks_started(tmp_path, earlier)
    q = tmp_path / "new.json"
    q.write_text("{}")
    os.utime(q, (1000, 1000))
    os.replace(q, p)
    assert ranks_started(tmp_path, earlier)


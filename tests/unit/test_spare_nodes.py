"""Issue 43: spare nodes inside the allocation — the schema and its refusals, the node choice
(a pure function), the replacement's record and how status shows it."""
from __future__ import annotations

import json

import pytest

from hpctrain.errors import HpctrainError
from hpctrain.follow.display import replacement_text
from hpctrain.follow.report import directory_report, text
from hpctrain.follow.startup import replacements
from hpctrain.job.checks import spare_cost
from hpctrain.job.load import load_job
from hpctrain.job.plan import directive_table
from hpctrain.rank.end import recovery
from hpctrain.rank.before import spares

BASE = {"name": "spares", "library": "command", "script": "train.py", "python": "python",
        "resources": {"nodes": 2, "spare_nodes": 1, "gpus_per_node": 2, "time": "02:00:00"}}


def _job(site="localcluster", **more):
    return load_job({**BASE, **more}, site=site)


def test_the_allocation_holds_the_spares_and_survives_a_node(home):
    job = _job()
    d = dict(directive_table(job, "/runs/x", None))
    assert d["nodes"] == "3" and "no-kill" in d
    assert "no-kill" not in dict(directive_table(_job(resources={"nodes": 2}), "/runs/x", None))
    assert spare_cost(job.spec) == ("1 idle beside 2: (2+1) nodes x 02:00:00 x 2 GPU(s) per node"
                                    " = 12 GPU-hours at most, 4 of them for the spares")


def test_a_backend_without_spares_refuses_them_and_says_why(home):
    with pytest.raises(HpctrainError) as exc:
        _job(site="local", resources={"nodes": 1, "spare_nodes": 1})
    assert "resources.spare_nodes" in str(exc.value) and "this machine is the only node" in str(exc.value)


def test_more_spares_than_nodes_the_run_may_leave_out_is_warned(home):
    job = _job(resources={"nodes": 2, "spare_nodes": 2}, preemption={"max_excluded_nodes": 1})
    assert any("at most 1 can be used" in w for w in job.warnings), job.warnings
    assert not any("spare_nodes" in w for w in _job().warnings)


def test_spares_need_the_recovery_that_swaps_them_in(home):
    with pytest.raises(HpctrainError, match="preemption.requeue"):
        _job(preemption={"requeue": False})
    with pytest.raises(HpctrainError):
        _job(resources={"nodes": 2, "spare_nodes": 65})
    with pytest.raises(HpctrainError):
        _job(resources={"nodes": 2, "spare_nodes": -1})


ALLOC = ["node1", "node2", "node3", "node4"]


def test_the_first_attempt_runs_on_the_first_healthy_nodes_the_rest_idle():
    assert spares.choose(ALLOC, [], 2) == ["node1", "node2"]
    assert spares.choose(ALLOC, ["node1"], 2) == ["node2", "node3"]
    assert spares.choose(ALLOC, ["node1", "node2", "node3"], 2) is None


def test_a_blamed_node_gives_its_place_to_a_spare_and_the_head_stays():
    assert spares.choose(ALLOC, ["node2"], 2, ["node1", "node2"]) == ["node1", "node3"]
    # The head itself blamed: the spare takes its place, first, as the new head.
    assert spares.choose(ALLOC, ["node1"], 2, ["node1", "node2"]) == ["node3", "node2"]
    # A node blamed before is never chosen again, even when it is not the last one blamed.
    assert spares.choose(ALLOC, ["node2", "node3"], 2, ["node1", "node3"]) == ["node1", "node4"]
    assert spares.choose(ALLOC, ["node3", "node4", "node1"], 2, ["node1", "node2"]) is None


def _excluded(run_dir, *nodes):
    (run_dir / "status").mkdir(exist_ok=True)
    (run_dir / "status" / "excluded.json").write_text(json.dumps(
        [{"node": n, "reason": "preflight", "message": "GPU 0 ECC", "time": "t", "job_id": "7"}
         for n in nodes]))


def test_pick_and_replace_record_the_swap_once_per_blamed_node(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    alloc = "node1,node2,node3"
    assert spares.main(["pick", str(tmp_path), "2", alloc]) == 0
    assert capsys.readouterr().out == "node1,node2\n"
    # No node blamed (a program's error): nothing to replace, the requeue path decides.
    assert spares.main(["replace", str(tmp_path), "2", alloc, "1", "1", "ranks failure"]) == 1
    _excluded(tmp_path, "node2")
    assert spares.main(["replace", str(tmp_path), "2", alloc, "1", "1", "preflight failure"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "node2 node3"
    assert spares.main(["pick", str(tmp_path), "2", alloc]) == 0
    assert capsys.readouterr().out == "node1,node3\n"
    # The next blamed node finds no healthy spare: the caller requeues.
    _excluded(tmp_path, "node2", "node3")
    assert spares.main(["replace", str(tmp_path), "2", alloc, "2", "1", "hang failure"]) == 1
    [r] = spares.read_replacements(str(tmp_path))
    assert (r["attempt"], r["out"], r["in"], r["why"]) == (1, ["node2"], ["node3"],
                                                          "preflight failure")


def test_another_allocations_choice_is_not_carried_over(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SLURM_JOB_ID", "8")
    (tmp_path / "status").mkdir()
    (tmp_path / "status" / "spares.json").write_text('{"job_id": "7", "chosen": ["node9", "x"]}')
    assert spares.main(["pick", str(tmp_path), "2", "node4,node5,node6"]) == 0
    assert capsys.readouterr().out == "node4,node5\n"


def test_an_attempt_id_counts_requeues_by_the_hundred():
    assert spares.attempt_id(0, {}) == 0
    assert spares.attempt_id(2, {"SLURM_RESTART_COUNT": "1"}) == 102


def test_status_shows_each_replacement_and_the_seconds_back_to_training(tmp_path):
    (tmp_path / "status").mkdir()
    lines = [{"job_id": "7", "attempt": 1, "out": ["node2"], "in": ["node3"],
              "why": "preflight failure, excluding node2", "failed_at": 1000.0},
             {"job_id": "7", "attempt": 2, "out": ["node1; rm -rf /"], "in": [], "why": "x",
              "failed_at": 2000.0}, "not a record", {"attempt": "1"}]
    (tmp_path / "status" / "replacements.jsonl").write_text(
        "\n".join(json.dumps(x) for x in lines) + "\n{broken\n")
    got = replacements(str(tmp_path), [{"job_id": "7", "attempt": 1, "first_step": 1041.2}])
    assert [g["back_s"] for g in got] == [41.2, None]
    assert got[1]["out"] == []  # an odd name is dropped, never shown or used
    assert replacement_text(got[0]) == (
        "replaced  attempt 2 of job 7: node2 out, node3 in (preflight failure, excluding "
        "node2); training again 41 s after the failure")
    assert replacement_text(got[1]).endswith("not training again yet")


def test_report_counts_the_time_the_replacements_lost(tmp_path):
    phases = tmp_path / "status" / "phases" / "7-1"
    phases.mkdir(parents=True)
    (phases / "shell.json").write_text('{"started": "1700000010", "setup": "1700000011"}')
    (phases / "rank-0.json").write_text('{"rank_start": "1700000020", "first_step": "1700000030.5"}')
    (tmp_path / "status" / "replacements.jsonl").write_text(json.dumps(
        {"job_id": "7", "attempt": 1, "out": ["node2"], "in": ["node3"], "why": "hang failure",
         "failed_at": 1700000000.0}) + "\n")
    r = directory_report(str(tmp_path), "run", "spares")
    assert (r.replacements, r.lost_to_replacements_s) == (1, 30.5)
    assert "  node replacements: 1 (spare nodes, no requeue), " in text(r)


def test_nodes_slurm_reports_down_are_blamed_for_the_ranks_failure(tmp_path):
    (tmp_path / "status").mkdir()
    assert recovery.blamed_nodes(str(tmp_path), "ranks", []) == []
    (tmp_path / "status" / "nodes-down.txt").write_text("node2\n$(reboot)\nnode2\nnode4\n")
    assert recovery.blamed_nodes(str(tmp_path), "ranks", []) == ["node2", "node4"]


def test_an_attempt_whose_node_a_spare_replaced_does_not_claim_a_requeue():
    from hpctrain.backends.base import JobState, State
    from hpctrain.follow.display import format_status
    from hpctrain.follow.status import RunStatus
    history = [{"attempt": 1, "job_id": "7", "reason": "ranks", "message": "lost node2",
                "without": ["node2"]}]
    swap = {"job_id": "7", "attempt": 1, "out": ["node2"], "in": ["node3"], "why": "ranks failure",
            "back_s": 5.0}
    st = RunStatus(run_id="r", name="n", site="s", backend="slurm", job="7", path="/x",
                   submitted=None, nodes=2, ranks_per_node=1, state=JobState(State.COMPLETED),
                   history=history, replacements=[swap])
    text = format_status(st)
    assert "attempt 1 ranks: lost node2; node2 replaced by a spare (no requeue)" in text
    assert "requeued" not in text
    assert format_status(msgspec_replace(st, replacements=[])).count("requeued without node2") == 1


def msgspec_replace(st, **changes):
    import msgspec
    return msgspec.structs.replace(st, **changes)

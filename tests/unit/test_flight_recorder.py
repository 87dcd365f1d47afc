"""A hang's culprit from PyTorch's flight recorder (issue 40, rank/during/flight.py, rank/during/culprit.py): over
real dumps of a gloo hang (tests/fixtures/flight_recorder/), the rank whose last collective lags
the others' is named with its node and blamed, so the requeue leaves that node out; a dump is
read as bounded JSON only, and one that is not this hang's, or not a dump, changes nothing."""
from __future__ import annotations

import copy
import json
import os
import pickle
import sys
import types

from hpctrain.rank.during import culprit, flight

from hpctrain.rank.end import recovery
from hpctrain.rank.before.bootstrap import summarize
from hpctrain.rank.records import JobFailure, RankIdentity, read_job_failure, write_identity, \
    write_job_failure
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "flight_recorder"
TOKEN = "5543-1795809052.124599"  # the request the captured dumps answered
DUMPS = {r: json.loads((FIXTURES / f"gloo-late-rank-3.rank-{r}.json").read_text()) for r in range(4)}
STACKS = ROOT / "tests" / "fixtures" / "stacks"


def test_the_real_dumps_count_each_ranks_collectives_and_single_out_the_late_one():
    assert culprit.enqueued(DUMPS[0]) == {("cpu", "0"): 2}
    assert culprit.enqueued(DUMPS[3]) == {("cpu", "0"): 1}
    late, said, ahead = culprit.lagging(DUMPS)
    assert (late, ahead) == ([3], [0, 1, 2])
    assert said == "its last collective in process group 0 was #1; rank(s) 0, 1, 2 wait in #2 (gloo:all_reduce)"
    assert culprit.lagging({r: DUMPS[r] for r in (0, 1, 2)}) is None  # level: nothing to tell
    assert culprit.lagging({0: DUMPS[0]}) is None


def _fixture(name: str) -> dict[int, dict]:
    return {r: json.loads((FIXTURES / f"{name}.rank-{r}.json").read_text()) for r in range(4)}


def test_a_rank_stalled_before_its_first_collective_is_the_one_the_others_wait_for():
    # Issue 50: rank 3 asleep before its first all-reduce; torch lists no group in its
    # pg_status and no entry at all, where ranks 0-2 enqueued #1. It enqueued nothing: it lags.
    dumps = _fixture("gloo-rank-3-before-its-first")
    assert dumps[3]["recorders"]["cpu"]["pg_status"] == {} and "entries" not in dumps[3]["recorders"]["cpu"]
    assert culprit.enqueued(dumps[3]) == {("cpu", "0"): 0}
    assert culprit.enqueued(dumps[0]) == {("cpu", "0"): 1}
    late, said, ahead = culprit.lagging(dumps)
    assert (late, ahead) == ([3], [0, 1, 2])
    assert said == ("it had enqueued no collective in process group 0; rank(s) 0, 1, 2 wait in #1 "
                    "(gloo:all_reduce)")
    # No rank has run a collective yet: nobody lags.
    assert culprit.lagging({r: dumps[3] for r in range(4)}) is None


def test_a_rank_busy_in_its_own_code_after_a_collective_is_the_one_the_others_wait_for():
    # Rank 3 computing (a CPU held, not a sleep) after all-reduce #1: its responder thread still
    # answers, and its count lags.
    dumps = _fixture("gloo-rank-3-busy-after-one")
    late, said, ahead = culprit.lagging(dumps)
    assert (late, ahead) == ([3], [0, 1, 2])
    assert said == "its last collective in process group 0 was #1; rank(s) 0, 1, 2 wait in #2 (gloo:all_reduce)"


def test_a_rank_stalled_before_its_first_collective_is_named_and_its_node_blamed(tmp_path):
    dumps = _fixture("gloo-rank-3-before-its-first")
    _hung_run(tmp_path, dumps, token=dumps[0]["request"], acks=dumps[0]["request"])
    summarize(str(tmp_path), "hang", 137)
    failure = read_job_failure(str(tmp_path))
    assert failure.nodes == ["node2"], failure
    assert failure.message.startswith(
        "rank 3 on node2 held the others (flight recorder): it had enqueued no collective in "
        "process group 0; rank(s) 0, 1, 2 wait in #1 (gloo:all_reduce). "), failure.message
    assert recovery.decide(str(tmp_path), 2)[:2] == (True, ["node2"])


def test_an_nccl_recorders_groups_are_judged_alike():
    # ProcessGroupNCCL's recorder (_dump_nccl_trace_json, CUDA builds) writes the same format
    # (FlightRecorder, version 2.10): here the captured gloo dump under that recorder's name.
    # Ranks 0-2 enqueued two more (NCCL returns at once); rank 3 is level in another group.
    dumps = {}
    for r, d in DUMPS.items():
        d = copy.deepcopy(d)
        nccl = d["recorders"].pop("cpu")
        nccl["pg_status"]["1"] = {"last_enqueued_collective": "7"}
        if r < 3:
            nccl["pg_status"]["0"]["last_enqueued_collective"] = "4"
        d["recorders"]["nccl"] = nccl
        dumps[r] = d
    late, said, ahead = culprit.lagging(dumps)
    assert (late, ahead) == ([3], [0, 1, 2])
    assert said.startswith("its last collective in NCCL process group 0 was #1; rank(s) 0, 1, 2 wait in #2")


def _hung_run(tmp_path, dumps: dict, token: str | None = TOKEN, acks: str = TOKEN) -> None:
    (tmp_path / "logs").mkdir()
    fr = tmp_path / "status" / "fr"
    fr.mkdir(parents=True)
    ranks = []
    for r in range(4):
        node = f"node{r // 2 + 1}"
        write_identity(str(tmp_path / "status"), RankIdentity(rank=r, local_rank=r % 2, world_size=4, local_world_size=2,
                                                              node=node, pid=100 + r))
        (tmp_path / "logs" / f"rank-{r}.log").write_text("no dump here\n")
        ranks.append({"rank": r, "node": node, "step": None, "idle_s": 21.0, "log_offset": 0,
                      "flight_recorder": token})
        if r in dumps:
            (fr / f"rank-{r}.json").write_text(json.dumps(dumps[r]))
            (fr / f"rank-{r}.ack").write_text(json.dumps(acks))
    write_job_failure(str(tmp_path), JobFailure(
        reason="hang", exit_status=3, message="no rank has progressed for 20 s", ranks=ranks))


def test_the_attempts_failure_names_the_lagging_rank_and_blames_its_node(tmp_path):
    _hung_run(tmp_path, DUMPS)
    summarize(str(tmp_path), "hang", 137)
    failure = read_job_failure(str(tmp_path))
    assert failure.nodes == ["node2"], failure
    assert failure.message.startswith(
        "rank 3 on node2 held the others (flight recorder): its last collective in process group 0 "
        "was #1; rank(s) 0, 1, 2 wait in #2 (gloo:all_reduce). no rank has progressed for 20 s")
    assert [r["culprit"] for r in failure.ranks] == [False, False, False, True]
    assert recovery.decide(str(tmp_path), 2)[:2] == (True, ["node2"])


def test_with_the_stacks_too_the_culprit_is_shown_where_it_was(tmp_path):
    _hung_run(tmp_path, DUMPS)
    waiting = (STACKS / "gloo-rank-waiting-in-all-reduce.txt").read_text()
    for r in range(3):
        (tmp_path / "logs" / f"rank-{r}.log").write_text(waiting)
    (tmp_path / "logs" / "rank-3.log").write_text((STACKS / "gloo-rank-sleeping-before-it.txt").read_text())
    failure = culprit.refine(str(tmp_path), read_job_failure(str(tmp_path)))
    assert failure.message.startswith("rank 3 on node2 (at gl.py:9 in train) held the others (flight recorder)")
    assert failure.ranks[0]["stack"] == "distributed_c10d.py:3252 in all_reduce"


def test_another_requests_dumps_or_none_change_nothing(tmp_path):
    _hung_run(tmp_path, DUMPS, acks="1-2.0")  # an earlier hang's answers
    assert culprit.refine(str(tmp_path), read_job_failure(str(tmp_path))).message == \
        "no rank has progressed for 20 s"
    assert read_job_failure(str(tmp_path)).nodes == []


def test_a_watcher_that_asked_nothing_reads_no_dump(tmp_path):
    _hung_run(tmp_path, DUMPS, token=None)  # the recorder was off
    assert culprit.read_dumps(str(tmp_path), read_job_failure(str(tmp_path))) == {}


def test_hostile_dumps_are_never_unpickled_nor_trusted(tmp_path):
    bad = {0: DUMPS[0], 1: DUMPS[1], 2: DUMPS[2], 3: DUMPS[3]}
    _hung_run(tmp_path, bad)
    fr = tmp_path / "status" / "fr"
    # A pickle in a dump's place (torch's own env-var dump format): refused as not JSON, never loaded.
    (fr / "rank-3.json").write_bytes(pickle.dumps(DUMPS[3]))
    assert flight.read_dump(str(tmp_path), 3, TOKEN) is None
    # Another rank's answer copied in, a dump of the wrong shape, a pipe, counters that are no numbers.
    (fr / "rank-2.json").write_text(json.dumps(DUMPS[1]))
    assert flight.read_dump(str(tmp_path), 2, TOKEN) is None
    (fr / "rank-1.json").write_text(json.dumps({**DUMPS[1], "recorders": ["cpu"]}))
    assert flight.read_dump(str(tmp_path), 1, TOKEN) is None
    os.unlink(fr / "rank-0.ack")
    os.mkfifo(fr / "rank-0.ack")
    assert flight.read_dump(str(tmp_path), 0, TOKEN) is None
    weird = copy.deepcopy(DUMPS[3])
    weird["recorders"]["cpu"]["pg_status"] = {"0": {"last_enqueued_collective": "1e9"}, "1": "x",
                                              "2": {"last_enqueued_collective": True}}
    weird["recorders"]["cpu"]["pg_status"]["0\x1b[2J"] = {"last_enqueued_collective": "5"}
    weird["recorders"]["x"] = {"pg_status": {"0": {"last_enqueued_collective": "9"}}}  # no recorder of torch's
    assert culprit.enqueued(weird) == {}
    failure = culprit.refine(str(tmp_path), read_job_failure(str(tmp_path)))
    assert failure.message == "no rank has progressed for 20 s" and failure.nodes == []


def test_the_recorder_is_on_as_torch_reads_it():
    assert flight.enabled({"TORCH_FR_BUFFER_SIZE": "2000"})
    assert flight.enabled({"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"})  # the older name
    assert not flight.enabled({"TORCH_FR_BUFFER_SIZE": "0", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"})
    assert not flight.enabled({}) and not flight.enabled({"TORCH_FR_BUFFER_SIZE": "lots"})


def test_a_rank_answers_with_each_recorder_its_torch_has(tmp_path, monkeypatch):
    raw = json.dumps(DUMPS[3]["recorders"]["cpu"]).encode()

    def broken():
        raise RuntimeError("no NCCL process group")
    c10d = types.SimpleNamespace(_dump_fr_trace_json=lambda: raw, _dump_nccl_trace_json=broken)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(_C=types.SimpleNamespace(_distributed_c10d=c10d)))
    (tmp_path / "status" / "fr").mkdir(parents=True)
    flight.answer(str(tmp_path), 3, "7-1.5")
    dump = flight.read_dump(str(tmp_path), 3, "7-1.5")
    assert dump["recorders"] == {"cpu": DUMPS[3]["recorders"]["cpu"],
                                 "nccl": {"error": "RuntimeError: no NCCL process group"}}
    monkeypatch.delitem(sys.modules, "torch")  # a program that never imported torch
    assert flight.dumps() == {}


def test_a_request_is_one_id_and_an_earlier_attempts_is_not_answered(tmp_path):
    fr = tmp_path / "status" / "fr"
    fr.mkdir(parents=True)
    assert flight._request(str(tmp_path)) is None
    (fr / "request.json").write_text(json.dumps({"id": "12-3.5"}))
    assert flight._request(str(tmp_path)) == "12-3.5"
    (fr / "request.json").write_text(json.dumps({"id": "x" * 65}))
    assert flight._request(str(tmp_path)) is None


def test_a_rank_the_watcher_named_by_its_progress_keeps_its_words_first(tmp_path):
    _hung_run(tmp_path, DUMPS)
    failure = read_job_failure(str(tmp_path))
    failure.ranks = [r for r in failure.ranks if r["rank"] == 3]  # one iteration behind the others
    failure.message = "no rank has progressed for 20 s: stuck rank 3 on node2 at iteration 5"
    failure = culprit.refine(str(tmp_path), failure)
    assert failure.message == (
        "no rank has progressed for 20 s: stuck rank 3 on node2 at iteration 5; the flight recorder "
        "agrees: its last collective in process group 0 was #1; rank(s) 0, 1, 2 wait in #2 (gloo:all_reduce)")
    assert failure.nodes == ["node2"] and failure.ranks[0]["culprit"] is True

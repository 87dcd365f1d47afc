"""A hang names its culprit (issue 29, rank/during/culprit.py): from the stacks the ranks dumped as they
were ended (real faulthandler dumps of a gloo hang in tests/fixtures/stacks/), the rank that is
not in the collective the others wait in is named with its node and blamed, so the requeue leaves
that node out."""
from __future__ import annotations

import json
import os

from hpctrain.rank.during import culprit

from hpctrain.rank.end import recovery
from hpctrain.rank.before.bootstrap import summarize
from hpctrain.rank.records import JobFailure, read_job_failure, write_job_failure
from tests.conftest import ROOT

STACKS = ROOT / "tests" / "fixtures" / "stacks"
WAITING = (STACKS / "gloo-rank-waiting-in-all-reduce.txt").read_text()
SLEEPING = (STACKS / "gloo-rank-sleeping-before-it.txt").read_text()


def test_the_real_dumps_say_where_each_rank_is():
    assert culprit.where(culprit.main_stack(WAITING)) == ("all_reduce",
                                                          "distributed_c10d.py:3252 in all_reduce")
    assert culprit.where(culprit.main_stack(SLEEPING)) == (None, "gl.py:9 in train")
    assert culprit.main_stack("[rank 0] step 3\nno dump here\n") is None


def test_a_ranks_log_in_an_hpctrain_job_gives_its_main_thread_under_runpy():
    waiting = (STACKS / "hpctrain-rank-waiting-in-all-reduce.log").read_text()
    sleeping = (STACKS / "hpctrain-rank-sleeping-before-it.log").read_text()
    assert culprit.where(culprit.main_stack(waiting))[0] == "all_reduce"
    assert culprit.where(culprit.main_stack(sleeping)) == (None, "late_rank.py:15 in <module>")


def test_the_ranks_outside_the_collective_most_wait_in_are_the_culprits():
    w, s = culprit.main_stack(WAITING), culprit.main_stack(SLEEPING)
    assert culprit.verdict({0: w, 1: w, 2: w, 3: s}) == ([3], "all_reduce", [0, 1, 2])
    assert culprit.verdict({0: w, 1: s}) == ([1], "all_reduce", [0])
    assert culprit.verdict({0: w, 1: w}) is None  # all wait: nothing singles one out
    assert culprit.verdict({0: s, 1: s}) is None  # none in torch: the stacks cannot tell (NCCL)
    assert culprit.verdict({0: w, 1: None}) is None


def _hung_run(tmp_path, logs: dict[int, str], before: str = "") -> list[dict]:
    (tmp_path / "logs").mkdir()
    ranks = []
    for r, text in logs.items():
        path = tmp_path / "logs" / f"rank-{r}.log"
        path.write_text(before + text)
        ranks.append({"rank": r, "node": f"node{r // 2 + 1}", "step": None, "idle_s": 21.0,
                      "log_offset": len(before.encode())})
    write_job_failure(str(tmp_path), JobFailure(
        reason="hang", exit_status=3, message="no rank has progressed for 20 s", ranks=ranks))
    return ranks


def test_the_attempts_failure_names_the_culprit_and_blames_its_node(tmp_path):
    # An earlier dump above where the log ended at the hang (a hang a restart got past) is not
    # this hang's: rank 0's shows it asleep, its dump of this hang waiting.
    _hung_run(tmp_path, {0: WAITING, 1: WAITING, 2: WAITING, 3: SLEEPING},
              before="step 1\n" + SLEEPING + "\nresumed\n")
    summarize(str(tmp_path), "hang", 137)
    failure = read_job_failure(str(tmp_path))
    assert failure.nodes == ["node2"], failure
    assert failure.message.startswith(
        "rank 3 on node2 (at gl.py:9 in train) held the others: not in the all_reduce that "
        "rank(s) 0, 1, 2 waited in. no rank has progressed for 20 s")
    assert [(r["rank"], r["culprit"], r["stack"]) for r in failure.ranks][2:] == [
        (2, False, "distributed_c10d.py:3252 in all_reduce"), (3, True, "gl.py:9 in train")]
    assert recovery.decide(str(tmp_path), 2)[:2] == (True, ["node2"])


def test_a_culprit_on_every_node_blames_none_and_unreadable_logs_change_nothing(tmp_path):
    _hung_run(tmp_path, {0: SLEEPING, 1: WAITING})  # one node: nothing to leave out
    failure = culprit.refine(str(tmp_path), read_job_failure(str(tmp_path)))
    assert failure.nodes == [] and failure.message.startswith("rank 0 on node1 (at gl.py:9")
    os.unlink(tmp_path / "logs" / "rank-0.log")
    os.mkfifo(tmp_path / "logs" / "rank-0.log")  # never opened to wait on
    unchanged = culprit.refine(str(tmp_path), read_job_failure(str(tmp_path)))
    assert unchanged.message == "no rank has progressed for 20 s"
    assert json.loads((tmp_path / "status" / "failure.json").read_text())["nodes"] == []


def test_a_finished_runs_status_shows_the_hung_attempt_and_the_requeue_without_its_node(tmp_path):
    from hpctrain.backends.base import JobState, State
    from hpctrain.follow.display import format_status
    from hpctrain.follow.status import RunStatus, _history
    from hpctrain.rank.records import archive_job_failure, read_excluded
    _hung_run(tmp_path, {0: WAITING, 1: WAITING, 2: WAITING, 3: SLEEPING})
    summarize(str(tmp_path), "hang", 137)
    recovery.decide(str(tmp_path), 2, job_id="41")
    archive_job_failure(str(tmp_path))  # the requeued attempt starts, then completes
    history = _history(str(tmp_path), read_excluded(str(tmp_path)))
    assert [(h["attempt"], h["reason"], h["without"]) for h in history] == [(1, "hang", ["node2"])]
    st = RunStatus(run_id="r", name="n", site="s", backend="slurm", job="41", path=str(tmp_path),
                   submitted=None, nodes=2, ranks_per_node=2, state=JobState(State.COMPLETED),
                   history=history)
    lines = format_status(st).splitlines()
    assert lines[-2].startswith("attempt 1 hang: rank 3 on node2 (at gl.py:9 in train) held the")
    assert lines[-2].endswith("; requeued without node2") and lines[-1] == "now       COMPLETED"

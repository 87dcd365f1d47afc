"""Slow ranks named from their progress rates (issue 29, rank/during/slow.py): judged against the
median once a rank's own window is long enough, named with the node in status/slow.json and
`status`, and with health.exclude_slow_nodes left out at the next requeue."""
from __future__ import annotations

import json
from types import SimpleNamespace

from hpctrain.backends.base import JobState, State
from hpctrain.follow.display import format_status
from hpctrain.follow.status import RunStatus
from hpctrain.job.load import load_job
from hpctrain.job.plan import make_plan
from hpctrain.rank.end import recovery
from hpctrain.rank.during import slow
from hpctrain.rank.records import (JobFailure, Progress, RankIdentity, read_excluded,
                                   write_identity, write_job_failure, write_progress)

T = 1_790_000_000.0


def rank(r, rate, window=400.0, attempt=1, node=None):
    return SimpleNamespace(rank=r, node=node or f"node{r // 2 + 1}", rate=rate, time=T + window,
                           since=T, attempt=attempt)


def test_a_rank_below_the_factor_of_the_median_is_named_slowest_first():
    ranks = [rank(0, 2.0), rank(1, 2.1), rank(2, 1.9), rank(3, 1.5), rank(4, 1.0)]
    got = slow.find(ranks, 0.8, 300)
    assert [(s["rank"], s["node"], s["ratio"]) for s in got] == [(4, "node3", 0.526),
                                                                (3, "node2", 0.789)]
    assert slow.describe(got[0]) == "rank 4 on node3: 1 steps/s, 0.53x the median 1.9/s over 400 s"


def test_only_sustained_rates_of_the_newest_attempt_are_judged():
    assert slow.find([rank(0, 2.0), rank(1, 0.5, window=299)], 0.8, 300) == []  # window short
    assert slow.find([rank(0, 2.0), rank(1, 0.5, attempt=0), rank(2, 2.0)], 0.8, 300) == []
    assert slow.find([rank(0, 2.0), rank(1, None), rank(2, 0.0)], 0.8, 300) == []
    assert slow.find([rank(0, 2.0), rank(1, 1.0)], 0.8, 300)[0]["rank"] == 1  # two suffice


def _run(tmp_path, exclude, rates):
    status = tmp_path / "status"
    (tmp_path / "bootstrap.json").write_text(json.dumps(
        {"slow_ranks": {"factor": 0.8, "window": 5, "exclude": exclude}}))
    for r, rate in enumerate(rates):
        write_progress(str(status), Progress(rank=r, step=100, time=T + 60, rate=rate,
                                             since=T, attempt=0))
        write_identity(str(status), RankIdentity(rank=r, local_rank=r % 2, world_size=len(rates),
                                                 local_world_size=2, node=f"node{r // 2 + 1}"))


def test_the_attempts_end_records_the_slow_ranks_and_excludes_their_nodes(tmp_path, capsys):
    _run(tmp_path, True, [2.0, 2.0, 1.0, 2.0, 0.9, 2.1])
    assert slow.verdict(str(tmp_path), 1) == 0
    said = capsys.readouterr().out.splitlines()
    assert said == ["slow rank: rank 4 on node3: 0.9 steps/s, 0.45x the median 2/s over 60 s",
                    "slow rank: rank 2 on node2: 1 steps/s, 0.50x the median 2/s over 60 s",
                    "exclude node3"]  # one more node only: max_excluded_nodes 1
    record = json.loads((tmp_path / "status" / "slow.json").read_text())
    assert [s["rank"] for s in record["ranks"]] == [4, 2] and record["factor"] == 0.8
    (entry,) = read_excluded(str(tmp_path))
    assert entry.node == "node3" and entry.reason == "slow" and "0.45x the median" in entry.message
    # A later failure's requeue leaves it out too (recovery reads the run's exclusions).
    write_job_failure(str(tmp_path), JobFailure(reason="hang", exit_status=3, message="hung"))
    assert recovery.decide(str(tmp_path), 2)[:2] == (True, ["node3"])


def test_without_exclude_the_slow_rank_is_named_only(tmp_path, capsys):
    _run(tmp_path, False, [2.0, 0.5])
    slow.verdict(str(tmp_path), 2)
    assert capsys.readouterr().out.startswith("slow rank: rank 1 on node1: 0.5 steps/s")
    assert read_excluded(str(tmp_path)) == []
    (tmp_path / "bootstrap.json").write_text(json.dumps({"slow_ranks": {"factor": 1.5, "window": 5}}))
    assert slow.settings(str(tmp_path)) is None  # a factor of a hostile bootstrap.json: refused


def test_status_names_the_slow_rank_with_its_node():
    found = slow.find([rank(0, 2.0), rank(1, 0.5)], 0.8, 300)
    st = RunStatus(run_id="r", name="n", site="s", backend="slurm", job="7", path="/p",
                   submitted=None, nodes=1, ranks_per_node=2, state=JobState(State.RUNNING),
                   slow=found)
    assert ("slow      rank 1 on node1: 0.5 steps/s, 0.40x the median 1.25/s over 400 s"
            in format_status(st).splitlines())
    assert st.to_json()["slow"][0]["node"] == "node1"


def test_the_plan_judges_multi_rank_jobs_by_default(tmp_path):
    def plan(**job):
        spec = {"name": "s", "script": "t.py", "resources": {"procs_per_node": 2}, **job}
        return make_plan(load_job(spec, site="local"), str(tmp_path)).bootstrap["slow_ranks"]
    assert plan() == {"factor": 0.8, "window": 300, "exclude": False}
    assert plan(health={"slow_rank_factor": None}) is None
    assert plan(resources={"procs_per_node": 1}) is None
    assert plan(health={"exclude_slow_nodes": True, "slow_rank_window": 60})["window"] == 60

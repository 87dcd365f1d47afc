"""Watching a run, the pure parts: progress summed up from the ranks' reports, how it is shown
(80 columns, identifiers never cut, one updating line or plain lines). The curves read from real
TensorBoard event files and the PNG drawn from them need the `watch` extra:
tests/local/test_watch_curves.py."""
from __future__ import annotations

import json

from hpctrain.backends.base import JobState, State
from hpctrain.follow.display import WaitPrinter, format_status, format_table
from hpctrain.follow.progress import main_metric, of_run, summarize
from hpctrain.rank.records import Progress, RankIdentity, write_identity, write_progress
from hpctrain.follow.status import RunStatus


# ----------------------------------------------------------------------------- progress

def test_main_metric_prefers_a_reward_or_return():
    assert main_metric({"loss": 1.0, "reward": 2.0}) == "reward"
    assert main_metric({"value_loss": 1.0, "Train/mean_reward": 2.0}) == "Train/mean_reward"
    assert main_metric({"loss": 1.0, "alpha": 0.1}) == "alpha"
    assert main_metric({}) is None


def test_summary_is_rank_zeros_with_the_slowest_rank_and_the_newest_attempt():
    reports = [
        Progress(rank=0, step=120, time=1000.0, rate=2.5, metrics={"reward": 70.5, "loss": 0.1}, attempt=1),
        Progress(rank=1, step=118, time=1001.0, rate=2.4, metrics={"loss": 0.2}, attempt=1),
        Progress(rank=2, step=400, time=900.0, rate=3.0, metrics={"reward": 10.0}, attempt=0),  # before the requeue
    ]
    p = summarize(reports, nodes={0: "node1", 1: "node2"}, now=1004.0)
    assert (p.step, p.min_step, p.rate, p.metric, p.value, p.attempt) == (120, 118, 2.5, "reward", 70.5, 1)
    assert p.age_s == 3.0  # since the newest report of the current attempt
    assert [(r.rank, r.node, r.age_s) for r in p.ranks] == [(0, "node1", 4.0), (1, "node2", 3.0), (2, None, 104.0)]
    assert summarize([]) is None


def test_progress_of_a_sweep_is_per_task(tmp_path):
    for task, step in ((0, 5), (2, 9)):
        status = tmp_path / "tasks" / str(task) / "status"
        write_progress(str(status), Progress(rank=0, step=step, time=10.0, metrics={"reward": step}))
        write_identity(str(status), RankIdentity(rank=0, local_rank=0, world_size=1,
                                                 local_world_size=1, node=f"node{task}"))
    found = of_run(str(tmp_path), array_size=3, now=12.0)
    assert [(p.task, p.step, p.ranks[0].node) for p in found] == [(0, 5, "node0"), (2, 9, "node2")]
    assert of_run(str(tmp_path), None) == []  # the sweep's own directory has no ranks


# ----------------------------------------------------------------------------- display

def status(progress=(), **kw) -> RunStatus:
    base = dict(run_id="20261122-010203-abcd", name="cartpole-ppo", site="localcluster",
                backend="slurm", job="1234", path="/p/runs/x/y", submitted="2026-11-22T01:02:03+00:00",
                nodes=2, ranks_per_node=2, state=JobState(State.RUNNING, nodes="node[1-2]", elapsed="00:01:02"),
                progress=list(progress))
    base.update(kw)
    return RunStatus(**base)


def progress(step=120, attempt=0, task=None, **kw):
    reports = [Progress(rank=r, step=step - r, time=100.0, rate=2.5,
                        metrics={"reward": 70.5, "loss": 0.25}, attempt=attempt) for r in range(2)]
    return summarize(reports, nodes={0: "node1", 1: "node2"}, task=task, now=103.0)


def test_list_shows_whole_names_and_ids_and_keeps_to_80_columns():
    long_name = "isaac-velocity-rough-anymal-c-ppo-sweep-over-learning-rates"
    rows = [status([progress()]), status(name=long_name, job="123456789_12"),
            status(state=JobState(State.FAILED, exit_code=137))]
    lines = format_table(rows).splitlines()
    assert long_name in lines[2] and "123456789_12" in lines[2] and "FAILED(137)" in lines[3]
    assert "step 120 reward 70.5 3s ago" in lines[1]
    short = format_table([status([progress()]), status()]).splitlines()
    assert all(len(line) <= 80 for line in short), short


def test_status_page_shows_progress_and_ranks_without_cutting_names():
    name = "a" * 70
    text = format_status(status([progress(attempt=1)], name=name, site="juwels-booster-development"),
                         ranks=True)
    assert f"job name  {name} on juwels-booster-development" in text
    assert "progress  step 120 (slowest rank 119) (2.5/s), reward 70.5, 3s ago, attempt 2" in text
    ranks = text.split("ranks:\n", 1)[1].splitlines()
    assert ranks[0].split() == ["rank", "node", "step", "rate", "updated", "metrics"]
    assert ranks[2].split() == ["1", "node2", "119", "2.5/s", "3s", "ago", "(attempt", "2)",
                                "loss=0.25", "reward=70.5"]
    done = format_status(status([progress()], state=JobState(State.COMPLETED, exit_code=0)))
    assert "progress  step 120 (slowest rank 119) (2.5/s), reward 70.5\n" in done  # no age once ended


def test_json_carries_the_progress_fields():
    data = json.loads(json.dumps(status([progress()]).to_json()))
    [p] = data["progress"]
    assert {"step", "min_step", "rate", "metric", "value", "metrics", "time", "age_s", "attempt"} <= set(p)
    assert {"rank", "node", "step", "rate", "metrics", "time", "age_s", "attempt"} <= set(p["ranks"][0])


def test_wait_prints_one_redrawn_line_on_a_terminal():
    out: list[str] = []
    printer = WaitPrinter(live=True, write=out.append, ranks=True, columns=60)
    printer(status([progress()]))
    printer(status([progress(step=121)]))
    printer.close()
    assert all(chunk.startswith("\r\033[K") and len(chunk) <= 4 + 59 for chunk in out[:2]), out
    assert "step 120" in out[0] and out[-1] == "\n"


def test_wait_prints_plain_lines_on_change_and_progress_at_most_every_interval(monkeypatch):
    out: list[str] = []
    clock = iter([0.0, 1.0, 2.0, 40.0, 41.0])
    monkeypatch.setattr("hpctrain.follow.display.time.monotonic", lambda: next(clock))
    printer = WaitPrinter(live=False, write=out.append, ranks=True, every=30)
    printer(status())  # RUNNING, no progress yet
    printer(status([progress(step=5)]))  # the first progress: printed
    printer(status([progress(step=6)]))  # one second later: held back
    printer(status([progress(step=30)]))  # 38 s later: printed
    printer(status([progress(step=31)], state=JobState(State.COMPLETED, exit_code=0)))  # a new state
    lines = "".join(out).splitlines()
    heads = [line for line in lines if line.startswith("1234:")]
    assert [("step 5" in h, "step 30" in h, "COMPLETED" in h) for h in heads] == [
        (False, False, False), (True, False, False), (False, True, False), (False, False, True)]
    assert "  rank 1 on node2: step 4 (2.5/s) loss=0.25 reward=70.5" in lines


def test_forward_line_reaches_this_machine():
    from hpctrain.follow.board import forward_line
    assert forward_line(6007, host="login31.example.org", user="me") == \
        "ssh -N -L 6007:127.0.0.1:6007 me@login31.example.org"

"""`hpctrain status` and `list` stay readable on an 80-column terminal."""
from __future__ import annotations

from hpctrain.backends.base import JobState, State
from hpctrain.follow.status import RunStatus
from hpctrain.follow.display import describe, format_status, format_table


def status(**kw) -> RunStatus:
    base = dict(run_id="20261122-010203-abcd", name="a-rather-long-job-name-for-a-table",
                site="juwels-booster", backend="slurm", job="123456789", path="/p/runs/x/y",
                submitted="2026-11-22T01:02:03+00:00", nodes=64, ranks_per_node=4,
                state=JobState(State.RUNNING, nodes="jwb[0001-0064]", elapsed="01:02:03"))
    base.update(kw)
    return RunStatus(**base)


def test_list_table_fits_80_columns():
    """Within 80 columns for names of a usual length; a longer name widens its column (a name,
    a run id and a job id are never cut) and the state keeps its exit code."""
    rows = [status(name="cartpole-ppo"), status(name="cartpole-ppo", state=JobState(State.FAILED, exit_code=137)),
            status(name="cartpole-ppo", state=JobState(State.PENDING, reason="Priority"))]
    lines = format_table(rows).splitlines()
    assert len(lines) == 4 and all(len(line) <= 80 for line in lines), lines
    assert "FAILED(137)" in lines[2]
    lines = format_table([status(), status(state=JobState(State.FAILED, exit_code=137))]).splitlines()
    assert all("a-rather-long-job-name-for-a-table  123456789  " in line for line in lines[1:])


def test_status_of_array_fits_and_summarises():
    tasks = [JobState(State.COMPLETED, exit_code=0, job=f"123456789_{i}") for i in range(3)] + [
        JobState(State.PENDING, reason="JobArrayTaskLimit", job="123456789_3")]
    st = JobState(State.RUNNING, job="123456789", tasks=tasks, counts={"COMPLETED": 3, "PENDING": 1})
    text = format_status(status(state=st, task_values=[{"env.LR": "0.001", "seed": i} for i in range(4)]))
    assert "tasks     3 completed, 1 pending" in text
    assert all(len(line) <= 80 for line in text.splitlines() if not line.startswith("directory"))


def test_failure_lines_name_rank_node_and_reason():
    text = format_status(status(state=JobState(State.FAILED, exit_code=1),
                                failures=[{"task": None, "rank": 1, "node": "node2", "exit_status": 1,
                                           "error": "ValueError: boom"}],
                                ended="ranks: rank 1 on node2 failed (exit status 1): ValueError: boom"))
    assert "rank 1 on node2 exit 1: ValueError: boom" in text
    assert "ended     ranks: rank 1 on node2" in text
    assert describe(JobState(State.FAILED, exit_code=1)) == "FAILED exit 1"
    assert describe(JobState(State.PENDING, reason="Resources")) == "PENDING (Resources)"

"""Never lose work (issue 12), the rank side's logic: the hang watcher's verdict, the recovery
after a failure (which nodes to leave out, capped), the failure archive, a rank's stop handler
and the train hooks' table. The cluster tests run the same code for real."""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from hpctrain.rank.end import recovery, stop

from hpctrain.rank.during import train_hooks, watch
from hpctrain.rank.records import (ExcludedNode, JobFailure, Progress, RankFailure, RankIdentity,
                                   archive_job_failure, read_excluded, read_job_failure,
                                   read_job_failures, write_excluded, write_identity,
                                   write_job_failure, write_progress)


def _ranks(run_dir: Path, nodes: dict[int, str], started: float = 100.0) -> str:
    status = str(run_dir / "status")
    for rank, node in nodes.items():
        write_identity(status, RankIdentity(rank=rank, local_rank=rank % 2, world_size=len(nodes),
                                            local_world_size=2, node=node, pid=0, started=started))
    return status


def _progress(status: str, rank: int, step: int, at: float) -> None:
    write_progress(status, Progress(rank=rank, step=step, time=at))


# ----------------------------------------------------------------------------- hangs

def test_no_hang_while_any_rank_progresses(tmp_path):
    status = _ranks(tmp_path, {0: "node1", 1: "node1", 2: "node2", 3: "node2"})
    for r in range(4):
        _progress(status, r, 7, 150.0)
    assert watch.scan(str(tmp_path), since=100.0, now_ts=150.0 + 29, timeout=30) is None


def test_hang_names_the_rank_behind_and_its_node(tmp_path):
    """A rank blocked in a collective stops one iteration before the others, which then wait
    for it: the watcher blames the one behind, and only its node."""
    status = _ranks(tmp_path, {0: "node1", 1: "node1", 2: "node2", 3: "node2"})
    for r in (0, 1, 2):
        _progress(status, r, 8, 150.0)
    _progress(status, 3, 7, 149.0)
    hang = watch.scan(str(tmp_path), since=100.0, now_ts=181.0, timeout=30)
    assert hang is not None
    assert [d["rank"] for d in hang.ranks] == [3] and hang.ranks[0]["node"] == "node2"
    assert hang.nodes == ["node2"]
    assert "rank 3 on node2 at iteration 7" in hang.message
    assert "wait for it at iteration 8" in hang.message


def test_hang_of_every_rank_blames_no_node(tmp_path):
    """All ranks at the same iteration: no node to blame (a requeue keeps every node)."""
    status = _ranks(tmp_path, {0: "node1", 1: "node2"})
    _progress(status, 0, 3, 120.0)
    _progress(status, 1, 3, 120.0)
    hang = watch.scan(str(tmp_path), since=100.0, now_ts=200.0, timeout=60)
    assert hang is not None and {d["rank"] for d in hang.ranks} == {0, 1} and hang.nodes == []


def test_output_counts_as_progress_for_a_rank_that_reports_none(tmp_path):
    _ranks(tmp_path, {0: "node1"})
    log = tmp_path / "logs" / "rank-0.log"
    log.parent.mkdir()
    log.write_text("step\n")
    os.utime(log, (190.0, 190.0))
    assert watch.scan(str(tmp_path), since=100.0, now_ts=200.0, timeout=30) is None
    assert watch.scan(str(tmp_path), since=100.0, now_ts=221.0, timeout=30) is not None


def test_reports_of_an_earlier_attempt_are_not_progress(tmp_path):
    status = _ranks(tmp_path, {0: "node1"}, started=500.0)
    _progress(status, 0, 40, 450.0)  # before this launch
    hang = watch.scan(str(tmp_path), since=500.0, now_ts=531.0, timeout=30)
    assert hang is not None and hang.ranks[0]["step"] is None


def test_watch_writes_failure_json_and_exits_3(tmp_path, monkeypatch):
    _ranks(tmp_path, {0: "node1"}, started=0.0)
    monkeypatch.setenv("HPCTRAIN_JOB_ID", "77")
    assert watch.watch(str(tmp_path), 0.2, poll=0.1) == watch.HANG_STATUS
    failure = read_job_failure(str(tmp_path))
    assert failure.reason == "hang" and failure.exit_status == 3 and failure.job_id == "77"
    assert failure.ranks[0]["rank"] == 0 and "launcher.hang_timeout" in failure.message


# ----------------------------------------------------------------------------- recovery

def _failure(run_dir: Path, reason: str, nodes=(), message="boom") -> None:
    write_job_failure(str(run_dir), JobFailure(reason=reason, exit_status=1, message=message,
                                               nodes=list(nodes), job_id="9"))


def test_a_node_failure_is_requeued_without_the_node_and_recorded(tmp_path):
    _failure(tmp_path, "preflight", ["node3"], "node3 did not reach the head")
    requeue, nodes, why = recovery.decide(str(tmp_path), 2)
    assert requeue and nodes == ["node3"] and "excluding node3" in why
    (entry,) = read_excluded(str(tmp_path))
    assert entry.node == "node3" and entry.reason == "preflight" and "head" in entry.message


def test_exclusions_are_capped(tmp_path):
    write_excluded(str(tmp_path), [ExcludedNode(node="node1", reason="hang", message="m")])
    _failure(tmp_path, "preflight", ["node2", "node3"])
    requeue, nodes, why = recovery.decide(str(tmp_path), 2)
    assert requeue and nodes == ["node1", "node2"]
    assert "not excluding node3" in why and "max_excluded_nodes=2" in why
    _failure(tmp_path, "preflight", ["node4"])
    requeue, nodes, _ = recovery.decide(str(tmp_path), 2)
    assert requeue and nodes == ["node1", "node2"]  # full: requeued, no more left out


def test_a_programs_own_error_is_not_requeued(tmp_path):
    _failure(tmp_path, "ranks")
    requeue, nodes, why = recovery.decide(str(tmp_path), 2)
    assert not requeue and nodes == [] and "error of its own" in why
    _failure(tmp_path, "cancelled")
    assert not recovery.decide(str(tmp_path), 2)[0]


def test_a_hardware_error_blames_the_ranks_node(tmp_path):
    ok = RankFailure(rank=0, node="node1", exit_status=1, error="ValueError: bad config",
                     time="2026-01-01T00:00:00Z")
    bad = RankFailure(rank=1, node="node2", exit_status=1,
                      error="RuntimeError: CUDA error: uncorrectable ECC error encountered",
                      time="2026-01-01T00:00:00Z")
    assert recovery.blamed_nodes(str(tmp_path), "ranks", [bad]) == ["node2"]
    assert recovery.blamed_nodes(str(tmp_path), "ranks", [ok]) == []


def test_preflight_blames_the_nodes_it_recorded(tmp_path):
    (tmp_path / "status").mkdir()
    (tmp_path / "status" / "preflight.json").write_text(json.dumps({"nodes": ["node4"]}))
    assert recovery.blamed_nodes(str(tmp_path), "preflight", []) == ["node4"]


def test_resume_exclusions_keep_the_recorded_nodes(tmp_path):
    write_excluded(str(tmp_path), [ExcludedNode(node="node2", reason="hang", message="m")])
    assert recovery.resume_exclusions(str(tmp_path), 2) == (["node2"], "excluded earlier")


def test_failures_are_archived_one_a_line(tmp_path):
    _failure(tmp_path, "hang", message="first")
    assert archive_job_failure(str(tmp_path))
    _failure(tmp_path, "preflight", message="second")
    assert archive_job_failure(str(tmp_path))
    assert not archive_job_failure(str(tmp_path))
    assert read_job_failure(str(tmp_path)) is None
    assert [f.message for f in read_job_failures(str(tmp_path))] == ["first", "second"]


# ----------------------------------------------------------------------------- a rank's signals

@pytest.fixture
def clean_signals():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR2)}
    state = dict(stop._state)
    yield
    for s, h in saved.items():
        signal.signal(s, h)
    stop._state.clear()
    stop._state.update(state)


def test_sigterm_with_library_hooks_sets_the_flag_and_writes_stop_json(tmp_path, clean_signals):
    assert stop.install("USR2", str(tmp_path), 3) == ["TERM", "USR2"]
    stop.hooked()
    os.kill(os.getpid(), signal.SIGTERM)
    assert stop.requested() == "TERM"
    record = json.loads((tmp_path / "stop-3.json").read_text())
    assert record["rank"] == 3 and record["signal"] == "TERM"


def test_sigterm_goes_to_a_programs_own_preemption_handler(tmp_path, clean_signals):
    stop.install("USR2", str(tmp_path), 0)
    got = []
    signal.signal(signal.SIGUSR2, lambda s, f: got.append(s))  # the program's own "save now"
    os.kill(os.getpid(), signal.SIGTERM)
    assert got == [signal.SIGUSR2] and stop.requested() == "TERM"


def test_unknown_train_hooks_are_refused():
    with pytest.raises(ValueError, match="unknown train hook"):
        train_hooks.install(["nope"])


def test_every_librarys_train_hooks_exist():
    from hpctrain.libraries import LIBRARIES, adapter
    for name in LIBRARIES:
        assert set(adapter(name).train_hooks) <= set(train_hooks.HOOKS), name
    assert {"rl_games", "rsl_rl", "skrl", "skrl_jax", "di_engine"} <= {
        h for n in LIBRARIES for h in adapter(n).train_hooks}


def test_skrl_reward_survives_skrls_write_and_clear(monkeypatch):
    """skrl's Agent.post_interaction writes its tracking data at every write_interval and then
    clears it (skrl/agents/torch/base.py: write_tracking_data): the progress hook reads the mean
    reward before that call and keeps the newest, so a write step still reports it."""
    import types
    reported = []
    monkeypatch.setattr(train_hooks, "_report", lambda step, **m: reported.append((step, m)))

    class Agent:  # the part of skrl's base Agent the hook touches, with skrl's clearing
        write_interval, checkpoint_interval, training = 2, 0, True

        def __init__(self):
            self.tracking_data = {}

        def load(self, path):
            pass

        def post_interaction(self, *, timestep, timesteps):
            if not (timestep + 1) % self.write_interval:
                self.tracking_data.clear()  # written to TensorBoard, then cleared

    base = types.SimpleNamespace(Agent=Agent)
    assert train_hooks._skrl_agent_hooks(base, lambda flag: flag, lambda: None, "torch")
    agent = Agent()
    agent.tracking_data["Reward / Total reward (mean)"] = [-900.0, -850.5]  # episodes ended
    agent.post_interaction(timestep=1, timesteps=10)  # a write step: skrl clears the data
    agent.post_interaction(timestep=2, timesteps=10)  # no episode ended since
    agent.tracking_data["Reward / Total reward (mean)"] = [float("nan")]  # no metric: kept
    agent.post_interaction(timestep=3, timesteps=10)
    assert reported == [(2, {"reward": -850.5}), (3, {"reward": -850.5}), (4, {"reward": -850.5})]

"""Time to first step, per attempt (issue 29): the marks the job writes (rank/phases.py, the
batch shell's shell.json) and the phases `status` shows from them (follow/startup.py)."""
from __future__ import annotations

import datetime
import json
import os

from hpctrain.backends.base import JobState, State
from hpctrain.follow import startup
from hpctrain.follow.display import format_status
from hpctrain.follow.status import RunStatus
from hpctrain.rank import phases

T = 1_790_000_000.0  # an epoch second of 2026


def write(run, attempt_dir, name, data):
    path = run / "status" / "phases" / attempt_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))


def full_attempt(run, job="77", attempt=0, t=T):
    d = f"{job}-{attempt}"
    # The shell writes its marks as text: bash's EPOCHREALTIME, a ',' under some locales.
    write(run, d, "shell.json", {"started": f"{t:.6f}", "setup": f"{t + 6:.6f}".replace(".", ",")})
    write(run, d, "node-node1.json", {"launch": t + 6.5, "imported": t + 14, "checked": t + 12,
                                      "health_s": 1.5})
    write(run, d, "node-node2.json", {"launch": t + 6.5, "imported": t + 15, "checked": t + 17,
                                      "health_s": 2.25, "floor_s": 0.75})
    write(run, d, "rank-0.json", {"rank_start": t + 19, "first_step": t + 41})


def test_the_phases_follow_the_critical_path(tmp_path):
    full_attempt(tmp_path)
    sent = datetime.datetime.fromtimestamp(T - 10, datetime.timezone.utc).isoformat()
    (a,) = startup.attempts(str(tmp_path), sent)
    # imports: the slowest node's import; health: node2's check outlasting it; the gate itself
    # took 2.25 s on the slowest node (hidden behind the import where it was shorter).
    assert a["phases"] == {"setup": 6.0, "imports": 9.0, "health": 2.0, "rendezvous": 2.0,
                           "library": 22.0}
    assert a["first_step_s"] == 41.0 and a["health_gate_s"] == 2.25 and a["nodes"] == 2
    assert a["network_floor_s"] == 0.75  # (within health: the check ends after the floor)
    assert a["queued_s"] == 10.0 and a["job_id"] == "77" and a["attempt"] == 0
    assert startup.line([a]) == ("first step 41 s after start: setup 6.0, imports 9.0, "
                                 "health 2.0, rendezvous 2.0, library 22")


def test_a_missing_mark_counts_in_the_next_phase_and_an_attempt_without_a_step_says_so(tmp_path):
    full_attempt(tmp_path)
    d = "78-1"
    write(tmp_path, d, "shell.json", {"started": str(T + 100), "setup": str(T + 103)})
    write(tmp_path, d, "rank-0.json", {"rank_start": T + 110})  # no node marks, no step yet
    write(tmp_path, "79-2", "shell.json", {"started": T + 200, "setup": T + 201})
    write(tmp_path, "79-2", "node-a.json", {"launch": T + 201, "imported": T + 204})  # no check
    write(tmp_path, "79-2", "rank-0.json", {"rank_start": T + 205, "first_step": T + 209})
    first, second, third = startup.attempts(str(tmp_path))
    assert third["phases"] == {"setup": 1.0, "imports": 3.0, "health": None, "rendezvous": 1.0,
                               "library": 4.0}
    assert first["job_id"] == "77" and "queued_s" not in first
    assert second["phases"] == {"setup": 3.0, "imports": None, "health": None,
                                "rendezvous": 7.0, "library": None}
    assert startup.line([first, second]) == "no first step yet (attempt 2): setup 3.0, rendezvous 7.0"
    assert startup.line([first, second, third]).startswith("first step 9.0 s after start (attempt 3)")


def test_untrusted_marks_are_read_bounded_and_checked(tmp_path):
    d = tmp_path / "status" / "phases"
    write(tmp_path, "5-0", "shell.json", {"started": "rm -rf /", "setup": T})
    os.mkfifo(d / "5-0" / "rank-0.json")  # never opened to wait on
    write(tmp_path, "5-0", "node-a.json", {"imported": float("inf"), "health_s": -3,
                                           "floor_s": "1e400"})
    write(tmp_path, "5-0", "node-b.json", "[1, 2")
    write(tmp_path, "..-x", "shell.json", {"started": T})  # not an attempt's name
    (a,) = startup.attempts(str(tmp_path))
    assert a["started"] is None and a["first_step_s"] is None and a["health_gate_s"] is None
    assert a["network_floor_s"] is None
    assert set(a["phases"].values()) == {None} and startup.line([a]) == "no first step yet"


def test_the_rank_side_marks_its_attempt(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCTRAIN_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("HPCTRAIN_JOB_ID", "991")
    monkeypatch.setenv("HPCTRAIN_ATTEMPT", "2")
    phases.mark("rank-0.json", {"rank_start": T})
    phases.mark("rank-0.json", {"first_step": T + 3})  # one writer adds to its file
    phases.mark(phases.node_file("node/../1"), {"imported": T - 1})
    folder = tmp_path / "status" / "phases" / "991-2"
    assert json.loads((folder / "rank-0.json").read_text()) == {"rank_start": T, "first_step": T + 3}
    assert (folder / "node-node_.._1.json").exists()


def test_status_shows_one_line_and_its_json_every_phase(tmp_path):
    full_attempt(tmp_path)
    st = RunStatus(run_id="r", name="n", site="s", backend="slurm", job="77", path=str(tmp_path),
                   submitted=None, nodes=2, ranks_per_node=1, state=JobState(State.COMPLETED),
                   startup=startup.attempts(str(tmp_path)))
    assert ("startup   first step 41 s after start: setup 6.0, imports 9.0, health 2.0, "
            "rendezvous 2.0, library 22") in format_status(st).splitlines()
    assert st.to_json()["startup"][0]["phases"]["library"] == 22.0


def test_the_plot_labels_each_attempt_with_its_time_to_first_step():
    from hpctrain.follow.plot import attempt_labels
    two = [{"first_step_s": 41.2}, {"first_step_s": 18.0}]
    assert attempt_labels(2, two) == ["attempt 1, first step after 41 s",
                                      "attempt 2, first step after 18 s"]
    # Attempts the curves count otherwise (a torchrun restart inside one): numbers only.
    assert attempt_labels(3, two) == ["attempt 1", "attempt 2", "attempt 3"]
    assert attempt_labels(1, [{"first_step_s": None}]) == ["attempt 1"]


def test_the_network_floor_is_part_of_the_node_check(tmp_path, monkeypatch):
    """The node check's end (checked) is after the network floor, whose own seconds are kept:
    the floor's time counts in the health phase, not in the rendezvous after it."""
    import time

    from hpctrain.rank.before import netfloor, preflight
    (tmp_path / "bootstrap.json").write_text(json.dumps({"netfloor": {"min_gbps": 1.0}}))
    monkeypatch.setenv("HPCTRAIN_RUN_DIR", str(tmp_path))
    monkeypatch.setattr(netfloor, "run", lambda settings: time.sleep(0.2) or 0)
    marks = {"checked": 1.0}
    before = time.time()
    assert preflight._network_floor(marks) == 0
    assert marks["floor_s"] >= 0.2 and marks["checked"] >= before + 0.2
    (tmp_path / "bootstrap.json").write_text(json.dumps({}))  # no floor: nothing changes
    marks = {"checked": 1.0}
    assert preflight._network_floor(marks) == 0 and marks == {"checked": 1.0}

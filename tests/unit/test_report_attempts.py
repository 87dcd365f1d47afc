"""`hpctrain report` after preemption (issue 40, item 3): sacct's record of every attempt of a
requeued job (the fixture is real `sacct --duplicates` output of the test cluster: job 2 requeued
once with `scontrol requeue`, and task 1 of array 3), the scheduler's elapsed time, GPU-hours
without samples, attempts lost before their first step, a sweep's best in its metric's direction."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from hpctrain.backends.slurm import accounting as acct
from hpctrain.follow import report as rep

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sacct" / "requeue-and-array.parsable2"


def test_every_attempt_of_a_requeued_job_and_an_array_task():
    attempts = acct.parse(FIXTURE.read_text())
    job2 = [a for a in attempts if a["job_id"] == "2"]
    assert [(a["attempt"], a["state"], a["elapsed_s"], a["cpus"]) for a in job2] == [
        (0, "REQUEUED", 2.0, 2), (1, "COMPLETED", 4.0, 2)]
    first, second = job2
    assert (first["start"], first["end"]) == (1795809622.0, 1795809624.0)
    assert (second["submit"], second["start"], second["end"]) == (1795809624.0, 1795809631.0, 1795809635.0)
    assert first["total_cpu_s"] == pytest.approx(0.004) and second["total_cpu_s"] == pytest.approx(0.012)
    (task,) = [a for a in attempts if a["job_id"] == "3"]
    assert task["array_id"] == "3_1" and task["attempt"] == 0 and task["state"] == "COMPLETED"
    assert all(a["gpus"] == 0 for a in attempts)  # this capture's cluster had no GPUs


def test_an_earlier_job_with_the_same_id_is_left_out_with_its_steps():
    text = ("7|7|COMPLETED|1000000000|1000000001|1000000100|99|billing=8,cpu=8,gres/gpu=8,node=2|8|01:00|\n"
            "7.0|7.0|COMPLETED|1000000001|1000000001|1000000100|99|cpu=8,node=2|8|01:00|9000M\n"
            + FIXTURE.read_text().replace("2|2|", "7|7|", 2).replace("2.batch|2.batch|", "7.batch|7.batch|"))
    attempts = [a for a in acct.parse(text, since=1795809600.0) if a["job_id"] == "7"]
    assert [a["elapsed_s"] for a in attempts] == [2.0]  # the old job's 99 s and 9000M are gone
    assert attempts[0]["max_rss_mib"] is None


def test_gpu_tres_and_hostile_lines():
    assert acct._gpus("billing=8,cpu=8,gres/gpu=8,node=2") == 8
    assert acct._gpus("cpu=8,gres/gpu:h100=4,gres/gpu=4,node=1") == 4  # counted once
    assert acct._gpus("cpu=8,gres/gpu:h100=2,gres/gpu:a100=1") == 3
    assert acct._gpus("cpu=8,gres/gpux=5") == 0
    hostile = "\n".join([
        "5|5|RUNNING|x|1795809622|Unknown|12|gres/gpu=2|2|00:01|",  # running: no end
        "5.0|5.0|RUNNING|1795809622|1795809622|Unknown|12|cpu=2|2|00:01|3.5G",
        "$(reboot)|5|COMPLETED|1|2|3|4|gres/gpu=1000|1|00:01|",  # not a job id
        "6|6|COMPLETED|1795809622|1795809622|1795809630|8|gres/gpu=1|1|00:01|" + "|" * 3,  # too many fields
        "8|8|PENDING|1795809622|Unknown|Unknown|0|cpu=1|1|00:00|",  # never started
        "9|9|cancelled by 0; rm -rf|1795809622|1795809622|1795809630|8|cpu=1|99999999999|zz|",
        "x" * 100_000,
    ])
    attempts = {a["job_id"]: a for a in acct.parse(hostile)}
    assert set(attempts) == {"5", "9"}
    assert attempts["5"]["end"] is None and attempts["5"]["gpus"] == 2
    assert attempts["5"]["max_rss_mib"] == pytest.approx(3.5 * 1024)
    assert attempts["9"]["state"] == "UNKNOWN" and attempts["9"]["cpus"] is None
    assert attempts["9"]["total_cpu_s"] is None


def _run(job_id="2", task=None, submitted=1795809600.0):
    return SimpleNamespace(id="r1", path="/nonexistent",
                           record=SimpleNamespace(job_id=job_id, submitted_ts=submitted, name="j",
                                                  array_size=0))


def _usage(tmp_path: Path, lines: list[dict]):
    (tmp_path / "usage").mkdir()
    (tmp_path / "usage" / "node8.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_no_samples_still_reports_the_allocation_of_every_attempt(tmp_path, monkeypatch):
    asked = []

    def fake(run, job_ids):
        asked.append(job_ids)
        text = FIXTURE.read_text().replace("billing=2,cpu=2,node=2", "billing=2,cpu=2,gres/gpu=8,node=2")
        return [a for a in acct.parse(text, run.record.submitted_ts) if a["job_id"] in job_ids]
    monkeypatch.setattr(rep, "_accounting", fake)
    r = rep.directory_report(str(tmp_path), "r1", "j", run=_run())
    assert asked == [["2"]]
    assert [(a.attempt, a.state, a.elapsed_s, a.gpus, a.gpus_source) for a in r.attempts] == [
        (0, "REQUEUED", 2.0, 8, "accounting"), (1, "COMPLETED", 4.0, 8, "accounting")]
    assert r.gpu_hours_allocated == pytest.approx(8 * 6 / 3600)
    assert r.allocation_source == "accounting" and r.gpu_hours_used is None
    assert r.lost_between_attempts_s == pytest.approx(1795809631 - 1795809624)
    # No progress report in either attempt: the requeued one is lost whole, the completed one not.
    assert [a.lost_s for a in r.attempts] == [2.0, 0.0] and r.lost_before_first_step_s == 2.0


def test_the_schedulers_elapsed_time_not_the_samplers_window(tmp_path, monkeypatch):
    _usage(tmp_path, [
        {"kind": "start", "time": 1795809633.0, "job_id": "2", "attempt": 1},
        {"t": 1795809633.5, "g": [[0, 50.0, 1000.0, 100.0]]},
        {"kind": "first_step", "time": 1795809634.0},
        {"t": 1795809634.0, "g": [[0, 100.0, 1000.0, 100.0]]},
    ])
    monkeypatch.setattr(rep, "_accounting", lambda run, ids: [
        a for a in acct.parse(FIXTURE.read_text()) if a["job_id"] in ids])
    r = rep.directory_report(str(tmp_path), "r1", "j", run=_run())
    second = r.attempts[1]
    assert (second.start, second.end, second.elapsed_s) == (1795809631.0, 1795809635.0, 4.0)
    assert second.first_step_s == 3.0 and second.lost_s == 3.0
    assert second.gpus == 1 and second.gpus_source == "samples"  # no GPUs in this sacct
    assert second.gpu_hours_used == pytest.approx(0.75 * 4 / 3600)
    assert r.lost_before_first_step_s == 2.0 + 3.0


def test_without_accounting_a_requeued_attempt_without_a_step_is_lost(tmp_path):
    _usage(tmp_path, [
        {"kind": "start", "time": 100.0, "job_id": "2", "attempt": 0},
        {"t": 130.0, "g": [[0, 0.0, 10.0, 50.0]]},
        {"kind": "start", "time": 200.0, "job_id": "2", "attempt": 1},
        {"kind": "first_step", "time": 210.0},
        {"t": 260.0, "g": [[0, 90.0, 10.0, 50.0]]},
    ])
    r = rep.directory_report(str(tmp_path), "r1", "j", run=None)
    assert [a.lost_s for a in r.attempts] == [30.0, 10.0]


@pytest.mark.parametrize("metric, best", [("loss", [2, 0, 1]), ("reward", [1, 0, 2]),
                                          ("val_error", [2, 0, 1]), ("score", [1, 0, 2])])
def test_a_sweeps_best_follows_its_metrics_direction(monkeypatch, metric, best):
    values = {0: 0.5, 1: 0.9, 2: 0.1}

    def task_report(directory, run_id, name, task, run):
        return rep.Report(run_id=run_id, name=name, task=task, metric=metric, value=values[task])
    monkeypatch.setattr(rep, "directory_report", task_report)
    monkeypatch.setattr(rep, "draw", lambda *a: None)
    run = _run()
    run.record.array_size = 3
    assert rep.report(run).by_metric == best

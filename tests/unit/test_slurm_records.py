"""The Slurm parser against real Slurm 22.05.8 output captured from the local cluster."""
from pathlib import Path

from hpctrain.backends.slurm import records as ss

FIX = Path(__file__).parent / "fixtures" / "slurm-22.05"


def by_name(records):
    return {r.name: r for r in records}


def test_squeue_json_states_reasons_and_exit_codes():
    recs = by_name(ss.parse_squeue_json((FIX / "squeue.json").read_text()))
    assert recs["4"].state == "RUNNING" and recs["4"].nodes == "node[1-2]" and recs["4"].node_count == 2
    assert recs["6"].state == "FAILED" and recs["6"].exit_code == 3  # raw wait status 768
    assert recs["6"].reason == "NonZeroExitCode"
    assert recs["8"].state == "PENDING" and recs["8"].reason == "BeginTime"
    assert recs["7_0"].state == "RUNNING" and recs["7_0"].array_job_id == "7"
    pending = recs["7_[1-3]"]
    assert pending.pending_tasks == (1, 2, 3) and pending.reason == "JobArrayTaskLimit"
    assert recs["4"].elapsed(now=recs["4"].start + 65) == 65
    assert recs["8"].elapsed() is None


def test_squeue_json_cancelled_running_task_reports_sigterm_status():
    recs = by_name(ss.parse_squeue_json((FIX / "squeue-array-cancelled.json").read_text()))
    assert recs["7_1"].state == "CANCELLED" and recs["7_1"].exit_code == 143  # 36608 = 143 << 8
    assert recs["7_0"].state == "COMPLETED" and recs["7_0"].exit_code == 0
    assert recs["7_[3]"].state == "CANCELLED"
    # A pending task cancelled on its own (7_2) leaves no record at all.
    assert not any(r.task == 2 or 2 in r.pending_tasks for r in recs.values())


def test_scontrol_lines_match_squeue():
    recs = by_name(ss.parse_scontrol((FIX / "scontrol.txt").read_text()))
    assert recs["4"].state == "RUNNING" and recs["4"].nodes == "node[1-2]"
    assert recs["6"].exit_code == 3 and recs["6"].state == "FAILED"
    assert recs["7_[1-3]"].pending_tasks == (1, 2, 3)
    assert recs["7_0"].job_id == "9" and recs["7_0"].task == 0
    assert recs["8"].reason == "BeginTime"
    arr = by_name(ss.parse_scontrol((FIX / "scontrol-array-cancelled.txt").read_text()))
    assert arr["7_1"].state == "CANCELLED" and arr["7_0"].state == "COMPLETED"
    assert arr["7_[3]"].pending_tasks == (3,)


def test_pending_without_reason_and_cancelled():
    (rec,) = ss.parse_scontrol((FIX / "scontrol-pending.txt").read_text())
    assert rec.state == "PENDING" and rec.node_count == 4 and rec.exit_code == 0
    (rec,) = ss.parse_scontrol((FIX / "scontrol-cancelled.txt").read_text())
    assert rec.state == "CANCELLED"


def test_sacct_parsable_lines():
    text = ("12_0|COMPLETED|0:0|node1|1|2024-05-01T10:00:00|2024-05-01T10:01:00|None\n"
            "12_1|FAILED|2:0|node2|1|2024-05-01T10:00:00|2024-05-01T10:00:30|NonZeroExitCode\n"
            "12_[2-3%2]|PENDING|0:0|None assigned|1|Unknown|Unknown|JobArrayTaskLimit\n"
            "13|CANCELLED by 0|0:15|node1|1|2024-05-01T10:00:00|2024-05-01T10:00:05|None\n")
    recs = by_name(ss.parse_sacct(text))
    assert recs["12_1"].exit_code == 2 and recs["12_1"].task == 1
    assert recs["12_[2-3]"].pending_tasks == (2, 3) and recs["12_[2-3]"].nodes is None
    assert recs["13"].state == "CANCELLED" and recs["13"].exit_code == 128 + 15
    assert recs["12_0"].elapsed() == 60


def test_array_expressions():
    assert ss.expand_tasks("0-3%2") == (0, 1, 2, 3)
    assert ss.expand_tasks("1,4-6") == (1, 4, 5, 6)
    assert ss.expand_tasks("0-10:5") == (0, 5, 10)
    assert ss.compress([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_squeue_json_reports_an_unreachable_controller():
    # Slurm 22.05's squeue --json exits 0 when it cannot reach slurmctld; the error is inside.
    text = (FIX / "squeue-unreachable.json").read_text()
    assert ss.squeue_errors(text) == ["slurm_load_jobs: Failed while looking for jobs: Unspecified error"]
    assert ss.squeue_errors((FIX / "squeue.json").read_text()) == []

"""Following a study (issue 41 item 5): `status`, `list`, `logs --trial`, `plot`, `report` and
the Python Study over a study directory made with Optuna's own API (the journal the workers
write: JournalStorage + JournalFileBackend + JournalFileOpenLock at RUN/study/journal.log), and
over hostile journals — a link, a FIFO, a huge file, garbage lines, records Optuna cannot replay,
escapes in every value — each one `error:` line naming the file, or values shown cleaned.
No processes: the run is final, so no scheduler is asked.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
from optuna.storages.journal._base import BaseJournalSnapshot  # what JournalStorage unpickles from
from optuna.trial import TrialState, create_trial

import hpctrain
from hpctrain.cli import main
from hpctrain.errors import HpctrainError
from hpctrain.runs.records import Run, add_to_index
from hpctrain.search import follow, reading
from tests.hostile import within

RUN_ID = "20260101-120000-ab12"
T = 1_700_000_000.0
SPACE = {"agent.learning_rate": FloatDistribution(1e-5, 1e-2, log=True),
         "agent.algorithm.entropy_coef": FloatDistribution(0.0, 0.1),
         "net": CategoricalDistribution(["small", "large"])}
ESC = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\u202e"




def _storage(path: Path) -> JournalStorage:
    return JournalStorage(JournalFileBackend(str(path), lock_obj=JournalFileOpenLock(str(path))))


def _trial(state, params, inter, attrs, value=None):
    return create_trial(state=state, params=params, distributions={k: SPACE[k] for k in params},
                        intermediate_values=inter, user_attrs=attrs, value=value)


def make_study(tmp_path: Path, direction: str = "maximize", kind: str = "study") -> Path:
    """A finished 2-node study of 6 trials, as the workers leave it (the search contract)."""
    d = tmp_path / "runs" / "cartpole" / RUN_ID
    (d / "study").mkdir(parents=True)
    (d / "run.json").write_text(json.dumps(dict(
        run_id=RUN_ID, name="cartpole", site="local", backend="local", job_id="local-1",
        state="COMPLETED", final=True, script="job.sh", nodes=2, procs_per_node=4, kind=kind)))
    (d / "job.yaml").write_text("name: cartpole\nresources: {nodes: 2, gpus_per_node: 4}\n")
    study = optuna.create_study(study_name=RUN_ID, storage=_storage(d / "study" / "journal.log"),
                                direction=direction)
    for k, v in dict(metric="reward", direction=direction, n_trials=6, parallel=2).items():
        study.set_user_attr(k, v)
    lr = "agent.learning_rate"
    w = lambda worker, start, end, **more: dict(worker=worker, nodes=f"node[{2 * worker + 1}-{2 * worker + 2}]",  # noqa: E731
                                               job_id=f"1234_{worker}", started=T + start,
                                               ended=T + end, attempts=1, **more)
    study.add_trial(_trial(TrialState.COMPLETE, {lr: 1e-3, "net": "small"},
                           {10: 0.3, 20: 0.6, 30: 0.8}, w(0, 0, 300, trial_dir="trials/0000"), 0.8))
    study.add_trial(_trial(TrialState.PRUNED, {lr: 1e-5, "net": "large"}, {10: 0.1},
                           w(1, 0, 100, pruned_step=10)))
    study.add_trial(_trial(TrialState.COMPLETE, {lr: 3e-4, "net": "large"},
                           {10: 0.4, 20: 0.95, 30: 0.9}, w(1, 100, 400), 0.9))
    study.add_trial(_trial(TrialState.FAIL, {lr: 1e-2, "net": "small"}, {},
                           w(0, 300, 310, fail_cause="CUDA out of memory")))
    running = study.ask({lr: SPACE[lr]})
    running.report(0.5, 10)
    for k, v in w(1, 400, 0).items():
        if k != "ended":
            running.set_user_attr(k, v)
    for n in range(5):
        logs = d / "trials" / f"{n:04d}" / "logs"
        logs.mkdir(parents=True)
        for rank in range(2):
            (logs / f"rank-{rank}.log").write_text(f"trial {n} rank {rank} trains\n")
    return d


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------- following

def test_status_reads_every_trial(tmp_path):
    d = make_study(tmp_path)
    st = follow.status(Run(d), now=T + 460)
    assert [(r.number, r.state) for r in st.trials] == [
        (0, "COMPLETE"), (1, "PRUNED"), (2, "COMPLETE"), (3, "FAIL"), (4, "RUNNING")]
    assert st.best.number == 2 and st.best.value == 0.9
    assert st.best.params == {"agent.learning_rate": 3e-4, "net": "large"}
    assert st.counts == {"COMPLETE": 2, "PRUNED": 1, "FAIL": 1, "RUNNING": 1}
    assert st.left == 1 and st.n_trials == 6 and st.parallel == 2 and st.metric == "reward"
    t0, t1, t2, t3, t4 = st.trials
    assert (t2.latest, t2.latest_step, t2.best) == (0.9, 30, 0.95)  # its best report beat its end
    assert t1.pruned_step == 10 and t1.seconds == 100
    assert (t0.worker, t0.nodes, t0.job_id) == (0, "node[1-2]", "1234_0")
    assert t3.fail_cause == "CUDA out of memory"
    assert t4.seconds is None and t4.latest == 0.5  # the workers ended: it was cut short
    rec = json.loads((d / "run.json").read_text())
    (d / "run.json").write_text(json.dumps(dict(rec, final=False, state="RUNNING")))
    assert follow.status(Run(d), now=T + 460).trials[4].seconds == 60  # running: until now
    assert t0.directory == str(d / "trials" / "0000")


def test_minimize_study_best_is_lowest(tmp_path):
    st = follow.status(Run(make_study(tmp_path, direction="minimize")))
    assert st.direction == "minimize" and st.best.number == 0
    assert st.trials[2].best == 0.4


def test_status_cli_text_and_json(tmp_path, capsys):
    d = make_study(tmp_path)
    code, out, _ = cli(capsys, "status", str(d))
    assert code == 0
    assert "trials    5 of 6: 2 complete, 1 pruned, 1 failed, 1 running; 1 left" in out
    assert "best      #2  0.9  agent.learning_rate=0.0003 net=large" in out
    assert "pruned at 10" in out and "failed: CUDA out of memory" in out
    assert f"dashboard optuna-dashboard {d}/study/journal.log" in out
    assert "w1 node[3-4]" in out
    code, out, _ = cli(capsys, "status", str(d), "--json")
    data = json.loads(out)
    assert data["study"]["best"]["number"] == 2 and data["run"]["run_id"] == RUN_ID
    assert data["study"]["trials"][1]["pruned_step"] == 10


def test_a_run_without_journal_is_shown_as_a_run(tmp_path, capsys):
    d = make_study(tmp_path, kind="command")
    os.remove(d / "study" / "journal.log")
    code, out, _ = cli(capsys, "status", str(d))
    assert code == 0 and out.startswith("run       ") and "trials" not in out


def test_list_one_line_per_study(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HPCTRAIN_HOME", str(tmp_path / "home"))
    d = make_study(tmp_path)
    rec = json.loads((d / "run.json").read_text())
    rec["submitted"] = "2026-01-01 12:00:00"
    (d / "run.json").write_text(json.dumps(rec))
    add_to_index(Run(d))
    code, out, _ = cli(capsys, "list")
    assert code == 0
    line = out.splitlines()[1]
    assert RUN_ID in line and "4/6 trials, best 0.9 #2" in line
    code, out, _ = cli(capsys, "list", "--json")
    assert json.loads(out)[0]["study"]["best"]["value"] == 0.9


def test_logs_of_one_trial(tmp_path, capsys):
    d = make_study(tmp_path)
    code, out, _ = cli(capsys, "logs", str(d), "--trial", "2")
    assert code == 0 and out == ("==> rank 0 <==\ntrial 2 rank 0 trains\n"
                                 "==> rank 1 <==\ntrial 2 rank 1 trains\n")
    code, out, _ = cli(capsys, "logs", str(d), "--trial", "2", "--rank", "1")
    assert out == "trial 2 rank 1 trains\n"
    code, _, err = cli(capsys, "logs", str(d), "--trial", "9")
    assert code == 2 and err.startswith(f"error: study {RUN_ID} has no trial 9")
    code, _, err = cli(capsys, "logs", str(d), "--trial", "1", "--task", "0")
    assert code == 2 and "not both" in err


def test_report_gpu_hours_and_what_pruning_saved(tmp_path, capsys):
    d = make_study(tmp_path)
    r = follow.cost(Run(d))
    by = {c.number: c for c in r.trials}
    assert r.nodes == 2 and r.gpus_per_node == 4
    assert by[0].gpu_hours == pytest.approx(8 * 300 / 3600) and by[0].source == "shape"
    assert by[1].node_hours == pytest.approx(2 * 100 / 3600)
    # The pruned trial ran 100 s against the completed trials' mean of 300 s: 200 s x 8 GPUs.
    assert r.mean_complete_s == 300 and r.pruned == 1
    assert r.saved_gpu_hours == pytest.approx(8 * 200 / 3600)
    code, out, _ = cli(capsys, "report", str(d))
    assert code == 0 and "pruning saved ~0.444 GPU-hours" in out
    code, out, _ = cli(capsys, "report", str(d), "--json")
    assert json.loads(out)["saved_node_hours"] == pytest.approx(2 * 200 / 3600)


def test_report_uses_the_samplers_files_when_present(tmp_path):
    d = make_study(tmp_path)
    usage = d / "trials" / "0000" / "usage"
    usage.mkdir()
    lines = [{"kind": "start", "time": T, "attempt": 0, "job_id": "1234"},
             {"t": T + 10, "g": [[0, 50.0, 100.0, 100.0], [1, 50.0, 100.0, 100.0]]},
             {"kind": "end", "time": T + 3600}]
    (usage / "node1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    c = follow.cost(Run(d)).trials[0]
    assert c.source == "samples" and c.gpu_hours == pytest.approx(2.0)


def test_plot_writes_one_png(tmp_path, capsys):
    d = make_study(tmp_path)
    code, out, _ = cli(capsys, "plot", str(d))
    assert code == 0 and out.strip() == str(d / "plots" / "study.png")
    assert (d / "plots" / "study.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, _, err = cli(capsys, "plot", str(d), "--metric", "reward")
    assert code == 2 and "no --metric" in err


def test_python_study_best_and_study_result(tmp_path):
    d = make_study(tmp_path)
    s = hpctrain.Study(str(d))
    b = s.best()
    assert (b.number, b.value, b.params["net"], b.metric) == (2, 0.9, "large", "reward")
    assert hpctrain.study_result(str(d)) == b
    assert s.result(timeout=1) == b  # the workers have ended: the best
    assert len(s.trials()) == 5 and s.report().pruned == 1


def test_best_before_any_trial_completed_says_so(tmp_path):
    d = make_study(tmp_path)
    (d / "study" / "journal.log").unlink()
    optuna.create_study(study_name=RUN_ID, storage=_storage(d / "study" / "journal.log"))
    with pytest.raises(HpctrainError, match="no completed trial yet"):
        follow.best(Run(d))


# ----------------------------------------------------------------------------- hostile journals

def _journal(d: Path) -> Path:
    return d / "study" / "journal.log"


def test_a_fifo_at_the_journal_is_refused_at_once(tmp_path, capsys):
    d = make_study(tmp_path)
    _journal(d).unlink()
    os.mkfifo(_journal(d))
    with within(5):
        code, _, err = cli(capsys, "status", str(d))
    assert code == 2 and "named pipe" in err and err.count("\n") == 2  # error: + fix:


def test_a_link_to_a_fifo_or_to_another_file(tmp_path, capsys):
    d = make_study(tmp_path)
    _journal(d).unlink()
    os.mkfifo(tmp_path / "pipe")
    _journal(d).symlink_to(tmp_path / "pipe")
    with within(5):
        code, _, err = cli(capsys, "report", str(d))
    assert code == 2 and "named pipe" in err
    _journal(d).unlink()
    (tmp_path / "secret").write_text("root:x:0:0\n")
    _journal(d).symlink_to(tmp_path / "secret")
    code, _, err = cli(capsys, "status", str(d))
    assert code == 2 and "journal.log is damaged: line 1 is not JSON" in err
    assert "Traceback" not in err


def test_a_huge_journal_is_not_read(tmp_path, capsys):
    d = make_study(tmp_path)
    with open(_journal(d), "ab") as f:
        f.truncate(reading.MAX_JOURNAL + 1)  # sparse: costs nothing on disk
    code, _, err = cli(capsys, "status", str(d))
    assert code == 2 and f"larger than {reading.MAX_JOURNAL >> 20} MiB" in err


def test_garbage_lines(tmp_path, capsys):
    d = make_study(tmp_path)
    good = _journal(d).read_bytes()
    # A worker killed mid-append leaves a line without its newline: the study stays readable.
    _journal(d).write_bytes(good + b'{"op_code": 4, "trial')
    assert len(follow.status(Run(d)).trials) == 5
    # A line of garbage anywhere else is damage, named by its line.
    lines = good.split(b"\n")
    _journal(d).write_bytes(b"\n".join(lines[:3] + [b"\x1b[2J not json"] + lines[3:]))
    code, _, err = cli(capsys, "status", str(d))
    assert code == 2 and "line 4 is not JSON" in err and "\x1b" not in err
    _journal(d).write_bytes(good + b"[" * 100_000 + b"\n")  # nesting deeper than the parser's stack
    code, _, err = cli(capsys, "status", str(d))
    assert code == 2 and "is not JSON" in err
    _journal(d).write_bytes(good + b"[1, 2]\n")
    assert "not a JSON object" in cli(capsys, "status", str(d))[2]


@pytest.mark.parametrize("record", [
    {"op_code": 99},
    {"op_code": 4, "worker_id": "x", "trial_id": 0, "param_name": "net",
     "param_value_internal": 7.0, "distribution": "not json"},
    {"no op code": True},
])
def test_records_optuna_cannot_replay(tmp_path, capsys, record):
    d = make_study(tmp_path)
    with open(_journal(d), "a") as f:
        f.write(json.dumps(record) + "\n")
    code, _, err = cli(capsys, "status", str(d))
    assert code == 2 and "damaged: Optuna cannot replay it" in err and "Traceback" not in err


def test_escapes_and_wrong_types_in_every_value(tmp_path, capsys):
    d = tmp_path / "runs" / "cartpole" / RUN_ID
    make_study(tmp_path)
    _journal(d).unlink()
    study = optuna.create_study(study_name=RUN_ID, storage=_storage(_journal(d)))
    study.set_user_attr("metric", "reward" + ESC)
    study.set_user_attr("stopped", ESC * 100)
    study.set_user_attr("n_trials", "6; rm -rf ~")
    name = "lr" + ESC
    dist = CategoricalDistribution([ESC, "$\\frac{a}{", 1e308])
    study.add_trial(create_trial(
        state=TrialState.COMPLETE, params={name: ESC}, distributions={name: dist}, value=1.0,
        intermediate_values={1: float("nan"), 2: float("inf"), 3: 2.0},
        user_attrs={"worker": "0; reboot", "nodes": ["a"], "job_id": "1; rm -rf ~",
                    "started": "yesterday", "ended": float("nan"), "fail_cause": ESC,
                    "pruned_step": -5, "attempts": True}))
    study.add_trial(create_trial(state=TrialState.COMPLETE, params={name: "$\\frac{a}{"},
                                 distributions={name: dist}, value=float("inf")))
    code, out, err = cli(capsys, "status", str(d))
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    t = follow.status(Run(d)).trials[0]
    assert (t.worker, t.nodes, t.job_id, t.attempts, t.pruned_step) == (None,) * 5
    assert isinstance(t.started, float)  # Optuna's own start time, not "yesterday"
    assert t.latest == 2.0 and t.reports == 1  # NaN and inf left out
    assert follow.status(Run(d)).best.number == 0  # an infinite value is no value
    code, out, _ = cli(capsys, "status", str(d), "--json")
    assert "\x1b" not in out and "NaN" not in out and "Infinity" not in out
    json.loads(out)
    assert cli(capsys, "plot", str(d))[0] == 0  # '$' in a drawn text is not matplotlib math


def test_reading_writes_nothing_and_unpickles_nothing(tmp_path):
    d = make_study(tmp_path)
    before = {p: p.stat().st_mtime_ns for p in d.rglob("*")}
    follow.status(Run(d))
    assert {p: p.stat().st_mtime_ns for p in d.rglob("*")} == before  # no lock, no new file
    assert not isinstance(reading._backend([]), BaseJournalSnapshot)  # no pickled snapshot


def test_a_trial_of_a_gone_worker_does_not_count(tmp_path):
    d = make_study(tmp_path)
    study = optuna.load_study(study_name=RUN_ID, storage=_storage(_journal(d)))
    study.add_trial(_trial(TrialState.FAIL, {"net": "small"}, {}, {"fail_cause": "worker gone"}))
    st = follow.status(Run(d))
    assert len(st.trials) == 6 and st.left == 1  # it runs again: still one trial to go
    assert follow.summary(st).startswith("4/6 trials")


def test_a_trials_own_output_comes_first(tmp_path, capsys):
    d = make_study(tmp_path)
    (d / "trials" / "0002" / "logs" / "job.out").write_text("[rank 0] trial 2 starts\n")
    code, out, _ = cli(capsys, "logs", str(d), "--trial", "2")
    assert code == 0 and out == "[rank 0] trial 2 starts\n"

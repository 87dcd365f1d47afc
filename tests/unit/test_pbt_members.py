"""A population member's own decisions (issue 42, items 2 and 5), over a real workspace on disk
and without processes: members compare at their own interval, a copy is staged before the
member's ranks are stopped (a copy that fails leaves it training), a crash restarts from its own
checkpoint or else copies the best member's, a signal keeps its values for the next start; and
`list`, `report` and the Python Study read a population, not an empty Optuna study."""
from __future__ import annotations

import json
import os
import random
import signal
import sys
import textwrap

import msgspec
import pytest

import hpctrain
from hpctrain.backends.local import LocalBackend
from hpctrain.cli import main
from hpctrain.job.load import load_job
from hpctrain.runs.records import Run, add_to_index
from hpctrain.schema.spec import Preemption, Search
from hpctrain.search.allocation import Allocation
from hpctrain.search.pbt import cost, explore, lineage
from hpctrain.search.pbt.lineage import Record
from hpctrain.search.pbt.member import Member, first_boundary
from hpctrain.search.trials import write_study_job

RUN_ID = "20260101-120000-pb01"
T = 1_700_000_000.0
SEARCH = {"method": "pbt", "parallel": 4, "seed": 1,
          "params": {"lr": {"low": 1e-5, "high": 1e-1, "log": True}},
          "pbt": {"interval": 4, "steps": 40, "fraction": 0.5, "factors": [0.1, 10]}}


def member(run_dir, index: int) -> Member:
    """A Member around a workspace, as Member.__init__ makes it, less the study's journal and
    job (no launch happens here)."""
    m = Member.__new__(Member)
    m.run_dir, m.index = run_dir, index
    m.search = msgspec.convert(SEARCH, Search)
    m.pbt = m.search.pbt
    m.dir = run_dir / "trials" / f"{index:04d}"
    (m.dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    m.history = lineage.read(run_dir, index)
    m.rng = random.Random(index)
    m.patterns = ["checkpoints/*.json"]
    m.stopped, m.copied = False, None
    m.alloc = Allocation(run_dir, LocalBackend(), Preemption(requeue=False))
    m.alloc.install = lambda: None  # no handlers in the test's own process: signals come as outcomes
    return m


def ready(run_dir, m: int, interval: int, score: float, lr: float, t: float) -> Record:
    """Member m's record of an interval, with its checkpoint saved in the workspace."""
    rel = f"checkpoints/step-{interval * 4:05d}.json"
    path = lineage.saved_path(run_dir, m, interval, rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"member": m, "step": interval * 4, "quality": score}))
    rec = Record(member=m, event="ready", time=t, params={"lr": lr}, interval=interval,
                 step=interval * 4, score=score, checkpoint=rel)
    lineage.append(run_dir, rec)
    return rec


def population(run_dir):
    """Member 0 far ahead (interval 5), 1 and 2 at interval 2, member 3 the worst at 2."""
    for m, lr in enumerate((0.03, 0.01, 0.02, 1e-5)):
        lineage.append(run_dir, Record(member=m, event="start", time=T, params={"lr": lr}))
    ready(run_dir, 0, 2, 8.0, 0.03, T + 10)
    ready(run_dir, 0, 5, 20.0, 0.03, T + 30)
    ready(run_dir, 1, 2, 6.0, 0.01, T + 11)
    ready(run_dir, 2, 2, 7.0, 0.02, T + 12)
    ready(run_dir, 3, 2, 0.5, 1e-5, T + 13)


def test_a_member_compares_at_its_own_interval(tmp_path):
    population(tmp_path)
    m = member(tmp_path, 1)
    assert {k: s for k, (s, _) in m.newest_scores(upto=2).items()} == {0: 8.0, 1: 6.0, 2: 7.0,
                                                                        3: 0.5}
    assert m.newest_scores()[0][0] == 20.0  # member 0's newest, further along


def test_a_copy_takes_the_parents_newest_checkpoint_then_stops_the_ranks(tmp_path):
    population(tmp_path)
    m = member(tmp_path, 3)
    stops = []
    new = m.copy_a_top_member({"lr": 1e-5}, upto=2, stop=lambda: stops.append(1))
    assert stops == [1] and new is not None
    rec = m.history[-1]
    assert (rec.event, rec.parent, rec.step) in {("exploit", 0, 20), ("exploit", 2, 8)}, rec
    placed = json.loads((m.dir / rec.checkpoint).read_text())
    assert placed["member"] == rec.parent and placed["step"] == rec.step
    assert any(abs(new["lr"] / lineage.read(tmp_path, rec.parent)[-1].params["lr"] - f) < 1e-9
               for f in (0.1, 10)) or new["lr"] in (1e-5, 1e-1)


def test_a_copy_that_fails_leaves_the_member_training(tmp_path):
    population(tmp_path)
    for m in (0, 2):  # the top members pruned their checkpoints meanwhile
        for p in (tmp_path / "population" / "checkpoints" / str(m)).rglob("*.json"):
            p.unlink()
    m = member(tmp_path, 3)
    stops = []
    assert m.copy_a_top_member({"lr": 1e-5}, upto=2, stop=lambda: stops.append(1)) is None
    assert stops == [] and m.history[-1].event == "ready"  # its ranks were never stopped
    assert m.why in ("member 0's checkpoint could not be copied",
                     "member 2's checkpoint could not be copied"), m.why


def _segments(m: Member, outcomes):
    seen = []

    def segment(params):
        seen.append(dict(params))
        outcome = outcomes.pop(0)
        if outcome == "signalled":
            m.alloc.signalled = signal.SIGTERM
        return outcome, params
    m.segment = segment
    return seen


def test_a_crash_restarts_from_its_own_checkpoint_with_its_values(tmp_path, monkeypatch):
    monkeypatch.setattr("hpctrain.search.pbt.member.SETTLE", 0)  # no wait for writes to settle
    population(tmp_path)
    m = member(tmp_path, 1)
    ckpt = m.dir / "checkpoints" / "step-00009.json"
    ckpt.write_text("{}")
    os.utime(ckpt, (T, T))  # settled
    seen = _segments(m, ["crashed", "ended"])
    assert m.run() == 0
    assert seen == [{"lr": 0.01}, {"lr": 0.01}]
    events = [(r.event, r.note) for r in lineage.read(tmp_path, 1)][-2:]
    assert events == [("restart", "continued (requeue or --resume)"),
                      ("restart", "after a crash, from its newest checkpoint")], events


def test_a_crash_with_no_checkpoint_of_its_own_copies_the_best(tmp_path, monkeypatch):
    monkeypatch.setattr("hpctrain.search.pbt.member.SETTLE", 0)  # no wait for writes to settle
    population(tmp_path)
    m = member(tmp_path, 3)
    seen = _segments(m, ["crashed", "ended"])
    assert m.run() == 0
    rec = [r for r in lineage.read(tmp_path, 3) if r.event == "exploit"][-1]
    assert rec.parent == 0 and rec.step == 20 and "no checkpoint of its own" in rec.note
    assert seen[1] == rec.params and (m.dir / rec.checkpoint).is_file()


def test_a_signal_keeps_the_values_for_the_next_start(tmp_path):
    population(tmp_path)
    m = member(tmp_path, 2)
    _segments(m, ["signalled"])
    assert m.run() == 128 + signal.SIGTERM
    again = member(tmp_path, 2)  # the requeue, or submit --resume
    seen = _segments(again, ["ended"])
    assert again.run() == 0 and seen == [{"lr": 0.02}]
    ended = member(tmp_path, 2)
    ended.record("end", {"lr": 0.02}, interval=10, step=40, score=30.0)
    assert member(tmp_path, 2).run() == 0  # an ended member does not train again


# ----------------------------------------------------------------------------- list, report, Study

def make_population(tmp_path):
    job_file = tmp_path / "pop.yaml"
    job_file.write_text(textwrap.dedent("""\
        name: pop
        script: train.py
        args: ["--lr=0.01"]
        resources: {nodes: 1, gpus_per_node: 2}
        search:
          method: pbt
          params: {lr: {low: 1.0e-5, high: 1.0e-1, log: true}}
          parallel: 4
          pbt: {interval: 4, steps: 40, fraction: 0.5}
        """))
    d = tmp_path / "runs" / "pop" / RUN_ID
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps(dict(
        run_id=RUN_ID, name="pop", site="local", backend="local", job_id="local-1",
        state="COMPLETED", final=True, script="job.sh", nodes=1, procs_per_node=2, kind="study",
        submitted="2026-01-01 12:00:00")))
    write_study_job(d, load_job(str(job_file), site="local"), RUN_ID, None, [sys.executable])
    population(d)
    # Member 3 copies member 0 and ends best; the others end as they are.
    lineage.append(d, Record(member=3, event="exploit", time=T + 31, params={"lr": 0.003},
                             interval=5, step=20, score=20.0, parent=0, parent_interval=5,
                             checkpoint="checkpoints/step-00020.json"))
    ready(d, 3, 10, 35.0, 0.003, T + 100)
    lineage.append(d, Record(member=3, event="end", time=T + 101, params={"lr": 0.003},
                             interval=10, step=40, score=35.0, checkpoint="checkpoints/step-00040.json"))
    for m, score in ((0, 25.0), (1, 12.0), (2, 14.0)):
        ready(d, m, 10, score, 0.01, T + 90)
        lineage.append(d, Record(member=m, event="end", time=T + 91, params={"lr": 0.01},
                                 interval=10, step=40, score=score,
                                 checkpoint="checkpoints/step-00040.json"))
    return d


def test_report_counts_each_launch_of_a_member():
    R = Record
    recs = [R(member=0, event="start", time=0, params={}),
            R(member=0, event="ready", time=10, params={}),
            R(member=0, event="restart", time=500, params={}),  # waited for a requeue
            R(member=0, event="ready", time=520, params={})]
    assert cost.seconds(recs, now=530) == 10 + 30  # the newest launch trains until now
    assert cost.seconds(recs + [R(member=0, event="end", time=525, params={})], now=900) == 35


def test_list_report_and_study_show_the_population(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HPCTRAIN_HOME", str(tmp_path / "home"))
    d = make_population(tmp_path)
    add_to_index(Run(d))
    assert main(["list"]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert RUN_ID in line and "best 35 member 3; 4 members" in line, line
    assert main(["list", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["population"]["best"]["member"] == 3 and "study" not in row
    assert main(["report", str(d)]) == 0
    out = capsys.readouterr().out
    assert "each member 1 node(s) x 2 GPU(s)" in out and "1 copy" in out, out
    assert "member    3 ended" in out and "0.056 GPU-h [shape]" in out, out  # 101 s x 2 GPUs
    assert main(["report", str(d), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["members"][3]["seconds"] == 101
    s = hpctrain.Study(str(d))
    best = s.best()
    assert (best.member, best.score, best.params) == (3, 35.0, {"lr": 0.003})
    assert best.checkpoint.endswith("population/checkpoints/3/000010/checkpoints/step-00040.json")
    assert [p.member for p in best.schedule][:2] == [0, 0] and best.schedule[-1].member == 3
    assert len(s.population().members) == 4 and s.report().copies == 1


def test_a_population_with_no_checkpoint_yet_has_no_best(tmp_path):
    d = make_population(tmp_path)
    for m in range(4):
        lineage.lineage_path(d, m).write_text(json.dumps(
            {"member": m, "event": "start", "time": T, "params": {"lr": 0.01}}) + "\n")
    with pytest.raises(hpctrain.HpctrainError, match="no member with a recorded checkpoint"):
        hpctrain.Study(str(d)).best()


# ----------------------------------------------------------------------------- Isaac Lab's resume

def _isaaclab_get_checkpoint_path(log_path, run_dir=".*", checkpoint=".*"):
    """Isaac Lab's isaaclab_tasks.utils.parse_cfg.get_checkpoint_path (sort_alpha, no
    other_dirs), as its rsl_rl train.py calls it with --load_run and --checkpoint: the last run
    directory whose name the regex matches, then the last matching file in natural order."""
    import re
    runs = sorted(os.path.join(log_path, e.name) for e in os.scandir(log_path)
                  if e.is_dir() and re.match(run_dir, e.name))
    files = [f for f in os.listdir(runs[-1]) if re.match(checkpoint, f)]
    files.sort(key=lambda m: f"{m:0>15}")
    return os.path.join(runs[-1], files[-1])


def test_an_isaaclab_rsl_rl_member_resumes_from_a_copied_run_directory(tmp_path):
    # Isaac Lab's rsl_rl train.py writes logs/rsl_rl/<experiment>/<timestamp>/model_<it>.pt
    # under the member's directory (its working directory). A copy lands at the parent's path
    # in it, beside the member's own newer-numbered run: the resume must name the copy's.
    from hpctrain.libraries.rsl_rl import RslRl
    from hpctrain.rank.before.bootstrap import resume_argv
    from hpctrain.rank.end.checkpoints import find_checkpoint
    population(tmp_path)
    m = member(tmp_path, 3)
    m.patterns = list(RslRl.isaaclab_checkpoint_globs)
    # Its own runs: a newer one, and one whose name starts with the copy's (Isaac Lab appends
    # "_<run name>" to the time; --load_run is matched from the start of a name and the last
    # match in alphabetical order wins), each with the copy's iteration among its own.
    for name in ("2026-01-01_10-00-09", "2026-01-01_10-00-05_b"):
        own = m.dir / "logs" / "rsl_rl" / "cartpole" / name
        own.mkdir(parents=True)
        for it in (0, 50, 60, 100):
            (own / f"model_{it}.pt").write_bytes(b"own")
            os.utime(own / f"model_{it}.pt", (T, T))
    rel = "logs/rsl_rl/cartpole/2026-01-01_10-00-05/model_60.pt"
    saved = lineage.saved_path(tmp_path, 0, 6, rel)
    saved.parent.mkdir(parents=True)
    saved.write_bytes(b"parent's weights")
    lineage.append(tmp_path, Record(member=0, event="ready", time=T + 40, params={"lr": 0.03},
                                    interval=6, step=24, score=24.0, checkpoint=rel))
    assert m.copy_a_top_member({"lr": 1e-5}, force=True) is not None  # the best: member 0
    found = find_checkpoint(str(m.dir), m.patterns)
    assert found == str(m.dir / rel)  # the newest, though its iteration is lower
    argv = resume_argv(["scripts/train.py", "--task", "Isaac-Cartpole-v0"],
                       list(RslRl.isaaclab_resume_template), found)
    assert argv[-5:] == ["--resume", "--load_run", r"2026\-01\-01_10\-00\-05$", "--checkpoint",
                         r"model_60\.pt$"], argv
    logs = str(m.dir / "logs" / "rsl_rl" / "cartpole")
    got = _isaaclab_get_checkpoint_path(logs, argv[-3], argv[-1])
    assert open(got, "rb").read() == b"parent's weights"
    # The names as they are, read as regexes from the start, would take the member's own run.
    wrong = _isaaclab_get_checkpoint_path(logs, "2026-01-01_10-00-05", "model_60.pt")
    assert wrong.endswith("2026-01-01_10-00-05_b/model_60.pt")


def test_a_copy_of_a_member_behind_is_kept_as_the_newest(tmp_path):
    # Member 3 records intervals 6 and 7, then copies member 2's interval-2 checkpoint (its
    # newest): that older interval's slot is the one others would copy, so pruning keeps it.
    population(tmp_path)
    m = member(tmp_path, 3)
    for interval in (6, 7):
        rel = f"checkpoints/step-{interval * 4:05d}.json"
        (m.dir / rel).write_text("{}")
        assert m.save_to_workspace(interval, rel)
    m.pbt = msgspec.structs.replace(m.pbt, keep=2)
    assert m.stage(2, lineage.read(tmp_path, 2)[-1]) and m.take(lineage.read(tmp_path, 2)[-1])
    slots = sorted(p.name for p in (tmp_path / "population" / "checkpoints" / "3").iterdir())
    assert slots == ["000002-2", "000007"], slots


def test_a_member_ahead_in_steps_but_worse_is_judged_at_its_boundary_and_copies(tmp_path):
    # Member 3 ran ahead (interval 6: its score, summed over more steps, is above members 1 and
    # 2's newest) but it trained worse: at the intervals the others reached, it held less than
    # each of them. Judged at its own boundary against their newest records, each compared
    # with what it held at that member's interval, it is in the bottom and copies a top
    # member's newest checkpoint, behind it in steps (as asynchronous PBT does), without
    # waiting for anyone to reach its interval.
    population(tmp_path)
    for interval, score in ((3, 1.5), (4, 3.0), (5, 4.5), (6, 9.0)):
        ready(tmp_path, 3, interval, score, 1e-5, T + 20 + interval)
    m = member(tmp_path, 3)
    records = m.records()
    assert explore.margins(3, records, 6, "maximize") == {3: 0.0, 0: 20.0 - 4.5, 1: 6.0 - 0.5,
                                                          2: 7.0 - 0.5}
    # (ranked by raw newest scores at or before its interval, it was in the top: 9 > 7 > 6)
    raw = {k: s for k, (s, _) in m.newest_scores(upto=6).items()}
    assert explore.parent_for(3, raw, 4, 0.5, "maximize", random.Random(0)) is None
    stops = []
    new = m.copy_a_top_member({"lr": 1e-5}, upto=6, stop=lambda: stops.append(1))
    rec = m.history[-1]
    assert new is not None and stops == [1] and rec.event == "exploit"
    assert (rec.parent, rec.interval) in {(0, 5), (2, 2)}, rec  # the top two, by how far ahead
    assert json.loads((m.dir / rec.checkpoint).read_text())["member"] == rec.parent


def test_a_copy_of_an_older_record_is_not_copied_back(tmp_path):
    # Member 1 (interval 3) copied member 2's interval-2 record. Until it has trained its new
    # values, it holds member 2's older record, which member 2's own newer one stands for: it
    # is not compared (member 2, far along, would otherwise go back for what it left). Once it
    # records interval 3, both compare there; and what member 1 holds before the copied
    # interval is member 2's training, not its own from before the copy.
    population(tmp_path)
    ready(tmp_path, 1, 3, 8.5, 0.01, T + 20)
    m1 = member(tmp_path, 1)
    m1.record("exploit", {"lr": 0.03}, interval=2, step=8, score=7.0, parent=2, parent_interval=2,
              checkpoint="checkpoints/step-00008.json")
    ready(tmp_path, 2, 3, 8.0, 0.02, T + 40)
    assert 1 not in explore.margins(2, member(tmp_path, 2).records(), 3, "maximize")
    ready(tmp_path, 1, 3, 7.5, 0.03, T + 50)
    records = member(tmp_path, 2).records()
    assert explore.margins(2, records, 3, "maximize")[1] == 7.5 - 8.0
    assert explore.held_score(records, 1, 3) == 7.5
    assert explore.held_score(records, 1, 2) == 7.0  # member 2's, not its own 6.0 of before
    assert explore.held_score(records, 1, 1) is None  # member 2 recorded nothing before 2


def test_a_copy_of_a_member_that_just_copied_explores_from_the_values_that_trained_it(tmp_path):
    # Member 2's newest record is its copy of member 0 (values drawn for it, untried yet): a
    # member copying member 2 explores from member 0's values, which earned that score.
    population(tmp_path)
    lineage.append(tmp_path, Record(member=2, event="exploit", time=T + 40, params={"lr": 7e-5},
                                    interval=5, step=20, score=20.0, parent=0, parent_interval=5,
                                    checkpoint="checkpoints/step-00020.json"))
    records = member(tmp_path, 3).records()
    assert explore.trained_values(records, records[2][-1]) == {"lr": 0.03}
    assert explore.trained_values(records, records[0][-1]) == {"lr": 0.03}


def test_a_member_that_does_not_copy_records_why_and_status_shows_it(tmp_path):
    from hpctrain.search.pbt import show
    d = make_population(tmp_path)
    m = member(d, 0)  # the top member at interval 5
    assert m.copy_a_top_member({"lr": 0.03}, upto=5) is None
    assert m.why == "in the top 2 of 4", m.why
    m.kept({"lr": 0.03}, 5)
    m.kept({"lr": 0.03}, 5)  # judged again as another member reaches interval 5: the same why
    kept = [r for r in lineage.read(d, 0) if r.event == "kept"]
    assert [(r.interval, r.why) for r in kept] == [(5, "in the top 2 of 4")]
    lonely = member(d, 1)
    lonely.why = "member 0's checkpoint could not be copied"  # (see the test of a failed copy)
    lonely.kept({"lr": 0.01}, 10)
    pop = show.population(Run(d))
    rows = {r.member: r for r in pop.members}
    assert rows[3].decision == "copied member 0 at interval 5"
    assert rows[1].decision == "interval 10: no copy, member 0's checkpoint could not be copied"
    assert [(p.event, p.why) for p in rows[1].history if p.event == "kept"] == [
        ("kept", "member 0's checkpoint could not be copied")]
    text = show.format_population(pop)
    assert "newest decision" in text and "no copy, member 0's checkpoint could not be" in text
    # A reason is bounded as it is read back, like the rest of the record.
    with open(lineage.lineage_path(d, 2), "ab") as f:
        f.write(msgspec.json.encode(Record(member=2, event="kept", time=T + 99, params={},
                                           interval=10, why="x" * 301)) + b"\n")
        f.write(msgspec.json.encode(Record(member=2, event="exploit", time=T + 99, params={},
                                           resampled=["k"] * 65)) + b"\n")
    assert lineage.read(d, 2)[-1].event == "end"


def test_only_an_eligible_top_member_is_copied():
    latest = {0: 9.0, 1: 8.5, 2: 1.0, 3: 0.5}
    assert explore.parent_for(1, latest, 4, 0.25, "maximize", random.Random(0)) is None
    assert explore.parent_for(3, latest, 4, 0.5, "maximize", random.Random(0), {1}) == 1
    assert explore.parent_for(3, latest, 4, 0.25, "maximize", random.Random(0), {1, 2}) is None


def test_a_member_that_copied_an_ended_one_ends_with_that_checkpoint(tmp_path):
    # Its launch had nothing left to train (no progress of its own): its end record names the
    # copied checkpoint, saved in its own slot of that interval.
    population(tmp_path)
    m = member(tmp_path, 3)
    (m.dir / "checkpoints" / "step-00040.json").write_text('{"step": 40}')
    m.record("exploit", {"lr": 0.3}, interval=10, step=40, score=30.0, parent=0,
             parent_interval=10, checkpoint="checkpoints/step-00040.json")
    m.finish({"lr": 0.3})
    end = lineage.read(tmp_path, 3)[-1]
    assert (end.event, end.interval, end.step, end.score) == ("end", 10, 40, 30.0)
    assert json.loads(lineage.record_path(tmp_path, end).read_text()) == {"step": 40}


@pytest.mark.parametrize("step, copied, boundary", [
    (1, None, 4), (3, None, 4), (4, None, 8), (9, None, 12),   # the next boundary
    (21, 5, 24), (19, 5, 24), (17, 4, 20), (16, 3, 20),  # a whole interval after the copy
    (9, 5, 24),  # a checkpoint far behind its record: never judged again at the copy's interval
])
def test_a_launch_from_a_copy_is_judged_after_a_whole_interval(step, copied, boundary):
    # A member that copied member 0's settled checkpoint of step 18 (recorded at step 20,
    # interval 5) resumes at step 19: judged at step 20 it would score below member 0's record
    # of that interval and copy again after one step of its new values (seen on the cluster).
    assert first_boundary(step, 4, copied) == boundary


def test_a_copy_is_marked_for_the_next_launch(tmp_path):
    population(tmp_path)
    m = member(tmp_path, 3)
    assert m.copy_a_top_member({"lr": 1e-5}, upto=2) is not None
    assert m.copied == m.history[-1].interval and m.history[-1].event == "exploit"

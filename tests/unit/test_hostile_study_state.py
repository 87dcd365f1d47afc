"""A study's and a population's state on disk, hostile (issue 50): what a shared run directory
holds can neither redirect a worker's write or removal, nor spin, exhaust or crash a command.

- links:  a link planted as a trial folder, one of its folders, its rank/ copy, the study's
          folder, a population's folder, a member's workspace or slot, a trial's status/ —
          refused, or the link itself removed; the target never written, never deleted;
- locks:  the journal's lock a dangling link, a link elsewhere, a FIFO, a folder — one
          `error:` at once (never Optuna's wait at 100 % CPU); Optuna's own symlink lock on the
          journal is a lock like the file one;
- sizes:  a 255 MiB journal (sparse), more lines or trials than a study writes, JSON nested
          100,000 (and 600) deep in a journal, a member's file and study/job.json — an error
          or a record left out, never MemoryError or RecursionError; `list` reads a journal
          only up to its own bounds, a larger one's row says so;
- resume: `submit --resume` on each kind of damaged journal says `error:` and the damage
          (exit 2), as `status` does, before anything is written;
- rows:   one population whose member file is a FIFO or too large marks its own row of `list`.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import optuna
import pytest

import hpctrain
from hpctrain.cli import main
from hpctrain.errors import HpctrainError
from hpctrain.job.load import load_job
from hpctrain.rank.records import NotRegular
from hpctrain.runs import tree
from hpctrain.runs.records import Run, add_to_index
from hpctrain.search import journal, reading
from hpctrain.search.pbt import lineage
from hpctrain.search.pbt.lineage import Record
from hpctrain.search.trials import read_study_job, write_study_job, write_trial
from hpctrain.search.worker import Worker
from hpctrain.search.worker import main as worker_main
from tests.hostile import tried, within
from tests.unit.test_pbt_members import member, ready

RUN_ID = "20260101-120000-st50"
T = 1_700_000_000.0
DEEP = b"[" * 100_000 + b"]" * 100_000


def _victim(tmp_path: Path) -> Path:
    """A folder of someone else's, with a file and a folder named as hpctrain names its own."""
    v = tmp_path / "victim"
    (v / "000001").mkdir(parents=True)
    (v / "000001" / "keep").write_text("theirs")
    (v / "progress-0.json").write_text("theirs")
    (v / "file").write_text("theirs")
    return v


def _untouched(v: Path) -> bool:
    return (sorted(p.name for p in v.iterdir()) == ["000001", "file", "progress-0.json"]
            and (v / "000001" / "keep").read_text() == "theirs")


def _job_file(tmp_path: Path, search: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent("""\
        name: st
        script: train.py
        args: ["--lr=0.01"]
        resources: {nodes: 1, gpus_per_node: 2}
        """) + search)
    return path


OPTUNA = "search: {params: {lr: {low: 1.0e-5, high: 1.0e-1, log: true}}, parallel: 2, n_trials: 4}\n"
PBT = textwrap.dedent("""\
    search:
      method: pbt
      params: {lr: {low: 1.0e-5, high: 1.0e-1, log: true}}
      parallel: 4
      pbt: {interval: 4, steps: 40, fraction: 0.5}
    """)


def make_study(tmp_path: Path, search: str = OPTUNA, run_id: str = RUN_ID) -> Path:
    """A local study's run directory as submit leaves it (study/job.json, the journal), ended."""
    d = tmp_path / "runs" / "st" / run_id
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps(dict(
        run_id=run_id, name="st", site="local", backend="local", job_id="local-1",
        state="COMPLETED", final=True, script="job.sh", nodes=1, procs_per_node=2, kind="study",
        submitted="2026-01-01 12:00:00")))
    (d / "job.sh").write_text("#!/bin/bash\nexit 0\n")
    job = load_job(str(_job_file(tmp_path, search)), site="local")
    write_study_job(d, job, run_id, None, [sys.executable])
    journal.create(d, run_id, job.spec.search)
    return d


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _journal(d: Path) -> Path:
    return journal.journal_path(d)


# ----------------------------------------------------------------------------- links

def test_a_link_as_a_trial_folder_fails_that_trial_and_nothing_is_written_through_it(tmp_path):
    d = make_study(tmp_path)
    victim = _victim(tmp_path)
    study = read_study_job(d)
    for planted in ("trials/0003", "trials/0003/logs", "trials/0003/status", "trials"):
        link = d / planted
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_dir():
            shutil.rmtree(link)
        link.symlink_to(victim, target_is_directory=True)
        with pytest.raises(NotRegular, match="symbolic link"):
            write_trial(d, 3, study, {"lr": 0.01})
        assert _untouched(victim), planted
        link.unlink()
        tried("study-link")
    # The trial's own files: a link at one of them is refused, its target left as it was.
    write_trial(d, 3, study, {"lr": 0.01})
    (d / "trials" / "0003" / "params.json").unlink()
    (d / "trials" / "0003" / "params.json").symlink_to(victim / "file")
    with pytest.raises(NotRegular):
        write_trial(d, 3, study, {"lr": 0.01})
    assert (victim / "file").read_text() == "theirs"


def test_a_link_as_the_trials_rank_copy_is_removed_itself(tmp_path):
    d = make_study(tmp_path)
    victim = _victim(tmp_path)
    rank = d / "trials" / "0002" / "rank"
    rank.parent.mkdir(parents=True)
    rank.symlink_to(victim, target_is_directory=True)
    # A killed worker's half copy, a link inside it to the victim: removed, never followed.
    half = d / "trials" / "0002" / f".rank-{os.getpid()}"
    half.mkdir()
    (half / "inside").symlink_to(victim, target_is_directory=True)
    script, _ = write_trial(d, 2, read_study_job(d), {"lr": 0.01})
    assert not rank.is_symlink() and (rank / "before" / "bootstrap.py").is_file()
    assert not half.exists() and script.is_file() and _untouched(victim)
    assert json.loads((rank.parent / "bootstrap.json").read_text())["program"]


def test_the_worker_fails_the_trial_whose_folder_is_a_link(tmp_path):
    d = make_study(tmp_path)
    victim = _victim(tmp_path)
    (d / "trials").mkdir()
    (d / "trials" / "0000").symlink_to(victim, target_is_directory=True)
    w = Worker(str(d), 0)
    trial = w.study.ask(w.dists)
    assert w.run_trial(trial, trial.number, trial.params, 1) is None  # the study goes on
    (t,) = w.study.get_trials(deepcopy=False)
    assert t.state.name == "FAIL" and "symbolic link" in t.user_attrs["fail_cause"]
    assert _untouched(victim)


def test_a_link_as_the_studys_folder_or_journal(tmp_path):
    d = make_study(tmp_path)
    victim = _victim(tmp_path)
    search = load_job(str(_job_file(tmp_path, OPTUNA)), site="local").spec.search
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "study").symlink_to(victim, target_is_directory=True)
    with pytest.raises(HpctrainError, match="symbolic link"):
        journal.create(fresh, "X", search)
    assert _untouched(victim)
    _journal(d).unlink()
    _journal(d).symlink_to(victim / "file")
    with pytest.raises(HpctrainError, match="symbolic link, not a regular file"):
        journal.load(d, RUN_ID, search)
    assert (victim / "file").read_text() == "theirs"


def test_a_population_writes_and_removes_nothing_through_a_link(tmp_path):
    victim = _victim(tmp_path)
    # population/ itself a link: the member's history is not written there.
    (tmp_path / "population").symlink_to(victim, target_is_directory=True)
    with pytest.raises(NotRegular):
        lineage.append(tmp_path, Record(member=1, event="start", time=T, params={"lr": 0.1}))
    assert _untouched(victim)
    (tmp_path / "population").unlink()
    m = member(tmp_path, 1)
    m.record("start", {"lr": 0.1})
    # The member's workspace a link to a folder holding slot-named folders: pruning lists
    # nothing of it and deletes nothing; a copy into it is refused.
    ws = lineage.population_dir(tmp_path) / "checkpoints" / "1"
    ws.parent.mkdir(parents=True)
    ws.symlink_to(victim, target_is_directory=True)
    m.prune_workspace()
    (m.dir / "checkpoints" / "step-00004.json").write_text("{}")
    assert not m.save_to_workspace(1, "checkpoints/step-00004.json")
    assert _untouched(victim)
    ws.unlink()
    # One slot a link: a copy into it is refused; pruning removes the link itself.
    ws.mkdir()
    (ws / "000002").symlink_to(victim, target_is_directory=True)
    assert not m.save_to_workspace(2, "checkpoints/step-00004.json")
    for interval in (3, 4, 5):
        assert m.save_to_workspace(interval, "checkpoints/step-00004.json")
    assert _untouched(victim)
    assert sorted(p.name for p in ws.iterdir()) == ["000002", "000004", "000005"]  # keep: 2
    tree.remove(ws / "000002", tmp_path)
    assert not (ws / "000002").is_symlink() and _untouched(victim)
    tried("population-link", 5)


def test_a_copy_from_another_member_is_not_placed_through_a_link(tmp_path):
    victim = _victim(tmp_path)
    for m in range(4):
        lineage.append(tmp_path, Record(member=m, event="start", time=T, params={"lr": 0.01}))
    ready(tmp_path, 0, 2, 9.0, 0.01, T + 10)
    ready(tmp_path, 3, 2, 0.5, 0.01, T + 11)
    m = member(tmp_path, 3)
    (m.dir / "checkpoints").rmdir()
    (m.dir / "checkpoints").symlink_to(victim, target_is_directory=True)
    assert m.copy_a_top_member({"lr": 0.01}, upto=2) is None  # the copy is not placed
    assert _untouched(victim)
    # The progress records of the previous launch: status/ a link, nothing of its target goes.
    (m.dir / "status").symlink_to(victim, target_is_directory=True)
    m.clear_progress()
    assert _untouched(victim)


def test_a_removal_removes_links_never_their_targets(tmp_path):
    victim = _victim(tmp_path)
    root = tmp_path / "run"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "to-dir").symlink_to(victim, target_is_directory=True)
    (root / "a" / "to-file").symlink_to(victim / "file")
    (root / "a" / "dangling").symlink_to(tmp_path / "nothing")
    tree.remove(root / "a", root)
    assert not (root / "a").exists() and _untouched(victim)
    (root / "x").symlink_to(victim, target_is_directory=True)
    with pytest.raises(NotRegular):  # a folder on the way is a link: not entered
        tree.remove(root / "x" / "000001", root)
    tree.remove(root / "x", root)  # the link itself
    assert not (root / "x").is_symlink() and _untouched(victim)
    deep = root / "deep"
    (deep / "/".join(["d"] * (tree.MAX_DEPTH + 2))).mkdir(parents=True)
    with pytest.raises(NotRegular, match="more than"):
        tree.remove(deep, root)


# ----------------------------------------------------------------------------- the lock

@pytest.mark.parametrize("kind", ["dangling", "elsewhere", "loop", "fifo", "folder"])
def test_a_bad_lock_is_one_error_at_once_never_a_spin(tmp_path, capsys, monkeypatch, kind):
    d = make_study(tmp_path)
    lock = Path(f"{_journal(d)}.lock")
    if kind == "dangling":
        lock.symlink_to(tmp_path / "nothing")
    elif kind == "elsewhere":
        _victim(tmp_path)
        lock.symlink_to(tmp_path / "victim" / "file")
    elif kind == "loop":
        lock.symlink_to(lock)
    elif kind == "fifo":
        os.mkfifo(lock)
    else:
        lock.mkdir()
    tried("study-lock")
    # Every worker of the study: one error, and its exit, within seconds.
    with within(10):
        assert worker_main([str(d), "0"]) == 2
    err = capsys.readouterr().err
    assert "journal.log.lock is" in err and "rm " in err, err
    # submit --resume says the same, before anything is written.
    monkeypatch.setenv("HPCTRAIN_HOME", str(tmp_path / "home"))
    before = _journal(d).read_bytes()
    with within(10):
        code, _, err = cli(capsys, "submit", "--resume", str(d))
    assert code == 2 and err.startswith("error: the study's lock") and "fix:" in err, err
    assert _journal(d).read_bytes() == before
    if kind == "dangling":
        assert "dangling" in err


def test_a_lock_planted_while_the_study_is_open_is_refused_at_the_next_wait(tmp_path):
    d = make_study(tmp_path)
    search = load_job(str(_job_file(tmp_path, OPTUNA)), site="local").spec.search
    study = journal.load(d, RUN_ID, search)
    Path(f"{_journal(d)}.lock").symlink_to(tmp_path / "nothing")
    with within(10), pytest.raises(HpctrainError, match="dangling"):
        study.set_user_attr("x", 1)


def test_a_link_planted_while_a_worker_waits_for_the_lock_ends_its_wait(tmp_path):
    """Another worker holds the lock; this one waits. A dangling link replaces the lock file
    meanwhile: the waiter says so at its next look (at most its ~1 s pause), never spins."""
    import threading
    d = make_study(tmp_path)
    lock = Path(f"{_journal(d)}.lock")
    lock.write_text("")  # held by another worker
    waiter = journal._lock(_journal(d))
    outcome = []

    def wait():
        try:
            outcome.append(waiter.acquire())
        except HpctrainError as exc:
            outcome.append(str(exc))
    t = threading.Thread(target=wait, daemon=True)
    t.start()
    t.join(0.2)
    assert t.is_alive() and not outcome  # waiting for the holder
    lock.unlink()
    lock.symlink_to(tmp_path / "nothing")
    t.join(10)
    assert not t.is_alive() and "dangling" in outcome[0], outcome
    lock.unlink()
    assert waiter.acquire() is True and lock.is_file()  # a free lock is taken
    waiter.release()
    assert not lock.exists()


def test_optunas_own_symlink_lock_on_the_journal_is_a_lock(tmp_path):
    """optuna-dashboard (JournalFileBackend's default lock) holds the same lock file as a link
    to the journal: a held lock, which the file lock waits for, then breaks when stale."""
    d = make_study(tmp_path)
    lock = Path(f"{_journal(d)}.lock")
    lock.symlink_to(_journal(d))
    journal.check_lock(_journal(d))  # accepted
    lock.unlink()
    lock.write_text("")  # a worker's, or one left by a worker killed -9
    journal.check_lock(_journal(d))


# ----------------------------------------------------------------------------- sizes

def test_a_255_mib_journal_is_refused_from_its_size_by_every_reader(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HPCTRAIN_HOME", str(tmp_path / "home"))
    d = make_study(tmp_path)
    other = make_study(tmp_path, run_id="20260101-120000-st51")
    add_to_index(Run(d))
    add_to_index(Run(other))
    os.truncate(_journal(d), 255 << 20)  # sparse: nothing on disk, nothing read
    tried("study-size", 6)
    for cmd in ("status", "report", "plot"):
        with within(10):
            code, _, err = cli(capsys, cmd, str(d))
        assert code == 2 and "255 MiB, larger than 64 MiB" in err and "fix:" in err, (cmd, err)
    with pytest.raises(HpctrainError, match="larger than 64 MiB"):
        hpctrain.Study(str(d)).best()
    with within(10):
        code, out, err = cli(capsys, "list")
    assert code == 0 and not err
    (row,) = [line for line in out.splitlines() if RUN_ID in line]
    assert "study: too large to list" in row
    assert any("0/4 trials" in line for line in out.splitlines() if "st51" in line), out
    code, out, _ = cli(capsys, "list", "--json")
    said = {r["run_id"]: r for r in json.loads(out)}[RUN_ID]["study"]["error"]
    assert said == f"study: too large to list (255 MiB journal; hpctrain status {RUN_ID})"
    with within(10):  # a worker refuses it as well
        assert worker_main([str(d), "0"]) == 2
    assert "larger than 64 MiB" in capsys.readouterr().err


def test_list_reads_journals_only_up_to_its_own_bounds(tmp_path, capsys, monkeypatch):
    """A journal beyond LIST_JOURNAL, and the ones after the list's LIST_BYTES, are not read
    for the table (status reads them): `list` stays quick with many large studies."""
    from hpctrain.search import follow
    monkeypatch.setenv("HPCTRAIN_HOME", str(tmp_path / "home"))
    runs = []
    for i in range(6):
        d = make_study(tmp_path, run_id=f"20260101-120000-b{i:03d}")
        add_to_index(Run(d))
        runs.append(d)
    big = follow.LIST_JOURNAL - (1 << 20)  # each within the per-journal bound: the records,
    for d in runs[:-1]:  # then zeros without a newline (a torn last line, left out)
        os.truncate(_journal(d), big)
    os.truncate(_journal(runs[-1]), follow.LIST_JOURNAL + 1)
    code, out, _ = cli(capsys, "list")
    assert code == 0
    rows = {d.name: next(line for line in out.splitlines() if d.name in line) for d in runs}
    assert "too large to list" in rows[runs[-1].name]
    # The budget runs out after LIST_BYTES // big journals: the rest say where to look.
    read_ = [d for d in runs[:-1] if "0/4 trials" in rows[d.name]]
    left = [d for d in runs[:-1] if "not read for this list" in rows[d.name]]
    assert len(read_) == follow.LIST_BYTES // big == 4 and len(left) == 1, out
    tried("study-size")


def test_more_lines_or_trials_than_a_study_writes(tmp_path, capsys):
    d = make_study(tmp_path)
    good = _journal(d).read_bytes()
    _journal(d).write_bytes(good + b"{}\n" * (reading.MAX_RECORDS + 1))
    code, _, err = cli(capsys, "status", str(d))
    assert code == 2 and f"more than {reading.MAX_RECORDS} lines" in err
    _journal(d).write_bytes(good + b'{"op_code":4}\n' * (reading.MAX_TRIALS + 1))
    code, _, err = cli(capsys, "status", str(d))
    assert code == 2 and f"more than {reading.MAX_TRIALS} trials" in err
    tried("study-size", 2)


def _attr_line(value: bytes, op: int = 2, key: str = "study_id") -> bytes:
    return (b'{"op_code": %d, "worker_id": "w", "%s": 0, "user_attr": {"x": ' % (op, key.encode())
            + value + b"}}\n")


@pytest.mark.parametrize("depth", [100_000, 600])
def test_deep_json_in_the_journal(tmp_path, capsys, depth):
    """100,000 deep stops the parser; 600 deep passes it, and would then stop Optuna's deepcopy
    of the study's user attrs: both are damage, named by its line."""
    d = make_study(tmp_path)
    deep = b"[" * depth + b"]" * depth
    with open(_journal(d), "ab") as f:
        f.write(_attr_line(deep))
    for cmd in ("status", "report", "list"):
        code, out, err = cli(capsys, cmd, *([str(d)] if cmd != "list" else []))
        if cmd == "list":
            continue  # not in the index: nothing to show
        assert code == 2 and "nested too deeply" in err and "unexpectedly" not in err, err
    tried("study-deep")


def test_deep_json_in_a_members_file_and_the_studys_job(tmp_path, capsys):
    d = make_study(tmp_path, PBT)
    lineage.append(d, Record(member=0, event="start", time=T, params={"lr": 0.01}))
    with open(lineage.lineage_path(d, 0), "ab") as f:
        f.write(b'{"member":0,"event":"start","time":2,"params":{"lr":' + DEEP + b"}}\n")
        f.write(b'{"member":0,"event":"start","time":3,"params":{"lr":'
                + b"[" * 600 + b"]" * 600 + b"}}\n")
    assert [r.time for r in lineage.read(d, 0)] == [T]  # the deep records left out
    code, out, err = cli(capsys, "status", str(d))
    assert code == 0 and "population st" in out, err
    job = d / "study" / "job.json"
    doc = json.loads(job.read_text())
    text = json.dumps(doc).replace('"spec": {', '"spec": {"deep": ' + "[" * 100_000
                                   + "]" * 100_000 + ", ", 1)
    job.write_text(text)
    with pytest.raises(ValueError, match="nested too deeply"):
        read_study_job(d)
    job.write_text(json.dumps(doc).replace('"spec": {', '"spec": {"deep": ' + "[" * 600
                                           + "]" * 600 + ", ", 1))
    with pytest.raises(ValueError, match="nested too deeply"):
        read_study_job(d)
    code, _, err = cli(capsys, "submit", "--resume", str(d))
    assert code == 2 and "cannot read the study's job" in err and "nested too deeply" in err
    tried("study-deep", 3)


# ----------------------------------------------------------------------------- submit --resume

DAMAGE = {  # each one Optuna's replay (or JSON) refuses; a record it skips is no damage
    "garbage line": b"\x1b[2J not json\n",  # JSONDecodeError in Optuna's reader
    "deep": _attr_line(DEEP),  # RecursionError
    "not an object": b"[1, 2]\n",
    "wrong type": b'{"op_code": 4, "worker_id": "w", "study_id": 0, "datetime_start": 5}\n',
    "missing key": b'{"op_code": 4, "worker_id": "w", "study_id": 0}\n',  # KeyError
    "no op code": b'{"worker_id": "w"}\n',
    "unknown op": b'{"op_code": 99, "worker_id": "w"}\n',  # AssertionError
    "attrs not a mapping": b'{"op_code": 2, "worker_id": "w", "study_id": 0, "user_attr": 5}\n',
    "study deleted": b'{"op_code": 1, "worker_id": "w", "study_id": 0}\n',
}


@pytest.mark.parametrize("name", DAMAGE)
def test_resume_on_a_damaged_journal_says_the_damage(tmp_path, capsys, monkeypatch, name):
    monkeypatch.setenv("HPCTRAIN_HOME", str(tmp_path / "home"))
    d = make_study(tmp_path)
    study = optuna.load_study(study_name=RUN_ID, storage=journal.storage(d))
    study.ask()  # trial 0, RUNNING: resume would adopt it
    good = _journal(d).read_bytes()
    lines = good.split(b"\n")
    # In the middle (a bad line before good ones), as the resumed workers would meet it.
    damaged = b"\n".join(lines[:3]) + b"\n" + DAMAGE[name] + b"\n".join(lines[3:])
    _journal(d).write_bytes(damaged)
    code, _, status_err = cli(capsys, "status", str(d))
    with within(20):
        code2, _, err = cli(capsys, "submit", "--resume", str(d))
    assert code == code2 == 2, (status_err, err)
    assert "is damaged" in err and "fix:" in err and "unexpectedly" not in err, err
    assert err.splitlines()[0] == status_err.splitlines()[0]  # as `status` says it
    assert _journal(d).read_bytes() == damaged  # nothing written
    assert json.loads((d / "run.json").read_text())["job_id"] == "local-1"  # nothing submitted
    tried("study-resume")


# ----------------------------------------------------------------------------- one row

@pytest.mark.parametrize("kind", ["fifo", "large", "job"])
def test_one_bad_population_marks_only_its_own_row(tmp_path, capsys, monkeypatch, kind):
    monkeypatch.setenv("HPCTRAIN_HOME", str(tmp_path / "home"))
    bad = make_study(tmp_path, PBT)
    good = make_study(tmp_path, PBT, run_id="20260101-120000-st52")
    for d in (bad, good):
        lineage.append(d, Record(member=0, event="start", time=T, params={"lr": 0.01}))
        add_to_index(Run(d))
    path = lineage.lineage_path(bad, 1)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "large":
        with open(path, "wb") as f:
            f.truncate(lineage.MAX_LINEAGE + 1)
    else:
        doc = json.loads((bad / "study" / "job.json").read_text())
        doc["spec"]["search"]["parallel"] = ["not", "a", "count"]
        doc["spec"]["search"]["pbt"]["interval"] = "every"
        (bad / "study" / "job.json").write_text(json.dumps(doc))
    with within(10):
        code, out, err = cli(capsys, "list")
    assert code == 0 and not err, err
    bad_row = next(line for line in out.splitlines() if bad.name in line)
    good_row = next(line for line in out.splitlines() if good.name in line)
    assert "4 members" in good_row, out
    with within(10):
        code, out, _ = cli(capsys, "list", "--json")
    rows = {r["run_id"]: r for r in json.loads(out)}
    assert code == 0 and len(rows[good.name]["population"]["members"]) == 4, rows
    if kind == "job":  # a count that is no count: the population read as one member
        assert "1 members" in bad_row and len(rows[bad.name]["population"]["members"]) == 1
    else:
        assert "study: the population's" in bad_row, bad_row
        said = rows[bad.name]["population"]["error"]
        assert "lineage cannot be read" in said and ("named pipe" if kind == "fifo"
                                                    else "larger than") in said, said
        code, _, err = cli(capsys, "status", str(bad))
        assert code == 2 and "lineage cannot be read" in err and "fix:" in err
    tried("population-row")


def test_a_terminal_shows_the_newest_trials_only():
    from hpctrain.search import follow, show
    rows = [follow.TrialRow(number=n, state="COMPLETE", params={"lr": 0.1}, value=1.0)
            for n in range(show.SHOWN_TRIALS + 5)]
    st = follow.StudyStatus(run_id=RUN_ID, name="st", path="/r", journal="/r/j", metric="m",
                            direction="maximize", n_trials=None, parallel=1, stopped=None,
                            counts={"COMPLETE": len(rows)}, left=None, best=rows[0], trials=rows)
    text = show.format_study(st)
    assert "5 earlier trial(s) not shown (status --json lists every one)" in text
    assert text.count(" COMPLETE ") == show.SHOWN_TRIALS and f"\n{len(rows) - 1:>4}  " in text

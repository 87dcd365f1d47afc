"""Messages that say what is wrong and how to fix it (issue 39, items 8 and 9), and `attach
--stacks`'s command on the nodes (issue 40, item 7): each case checks the exact words a user
reads. No process is started (the snapshots are of plain directories, no git)."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml

from hpctrain.backends.local import LocalBackend
from hpctrain.backends.slurm import pending, reservations
from hpctrain.errors import HpctrainError
from hpctrain.follow.attach import own_copy, rank_command
from hpctrain.job.load import load_job
from hpctrain.rank.records import RunRecord
from hpctrain.runs import snapshot
from hpctrain.runs.records import Run
from hpctrain.schema.spec import Snapshot
from hpctrain.submission import prepare, snapshot_source


def _job(tmp_path: Path, text: str) -> Path:
    (tmp_path / "train.py").write_text("pass\n")
    path = tmp_path / "job.yaml"
    path.write_text("name: t\nscript: train.py\n" + text)
    return path


def _refused(path, **kw) -> HpctrainError:
    with pytest.raises(HpctrainError) as err:
        load_job(path, site="local", **kw)
    return err.value


# ------------------------------------------------------------------ idle_gpus without sampling

def test_idle_gpus_without_sampling_is_refused_at_validate(home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = _refused(_job(tmp_path, "sample_every: 0\nidle_gpus: {below: 5, for: 20m}\n"))
    assert err.where == f"{tmp_path / 'job.yaml'}:4"
    assert err.what == (f"'idle_gpus' is set but 'sample_every' is 0 ({tmp_path / 'job.yaml'}:3): "
                        "the idle-GPU stop judges the GPU samples, so it would never act")
    assert err.fix == ("give sample_every a number of seconds (e.g. sample_every: 5, the "
                       "default), or remove idle_gpus (idle_gpus: null drops a site's)")
    # Sampling on (the default), or no idle stop: valid.
    load_job(_job(tmp_path, "idle_gpus: {below: 5}\n"), site="local")
    load_job(_job(tmp_path, "sample_every: 0\n"), site="local")


# ----------------------------------------------------------- numbers YAML 1.1 reads as text

@pytest.mark.parametrize("line,key,written,fix", [
    ("sample_every: 1.5e1", "sample_every", "1.5e1", "write it as 1.5e+1 or 15.0"),
    ("idle_gpus: {below: 2E-1}", "idle_gpus.below", "2E-1", "write it as 2.0e-1 or 0.2"),
    ("resources: {nodes: 2e0}", "resources.nodes", "2e0", "write it as 2"),
    ("health: {timeout: 1e3}", "health.timeout", "1e3", "write it as 1000"),
    # A key that takes seconds or a duration (90s): the number is what was meant.
    ("idle_gpus: {for: 1.5e1}", "idle_gpus.for", "1.5e1", "write it as 15"),
    ("seed: 1.5e0", "seed", "1.5e0", "give a whole number (1.5e0 is 1.5)"),
])
def test_an_exponent_yaml_reads_as_text_says_how_to_write_the_number(home, tmp_path, monkeypatch,
                                                                     line, key, written, fix):
    monkeypatch.chdir(tmp_path)
    err = _refused(_job(tmp_path, line + "\n"))
    assert err.what == (f"'{key}' is {written}, which YAML 1.1 reads as text, not a number (its "
                        "exponent lacks a '.' or a sign)")
    assert err.fix == fix and err.where == f"{tmp_path / 'job.yaml'}:3"


def test_the_exponent_message_names_a_set_argument_too(home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = _refused(_job(tmp_path, ""), overrides=["sample_every=1e2"])
    assert err.where == "--set sample_every=1e2" and err.fix == "write it as 1.0e+2 or 100.0"
    # As it says: that spelling is a number.
    assert load_job(_job(tmp_path, "sample_every: 1.0e+2\n"), site="local").spec.sample_every == 100


def test_text_where_text_is_taken_is_not_called_a_number(home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = load_job(_job(tmp_path, "env: {LR: 1e-3}\nargs: [--lr, 1e-3]\n"), site="local")
    assert job.spec.env["LR"] == "1e-3" and job.spec.args == ["--lr", "1e-3"]


# ------------------------------------------------------------------------- notify.url_from

EXAMPLE = "e.g. export NTFY_URL='https://ntfy.sh/my-topic' and url_from: NTFY_URL"


def test_a_pasted_url_in_url_from_asks_for_a_variable_name_and_is_not_repeated(home, tmp_path,
                                                                                monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = "https://user:s3cret@ntfy.example/topic"
    err = _refused(_job(tmp_path, f"notify: {{url_from: '{url}'}}\n"))
    assert err.what == ("'notify.url_from' holds a URL, but it takes the name of the environment "
                        "variable that holds the URL (the URL itself is never written into a job)")
    assert err.fix == f"put the URL in a variable and give its name: {EXAMPLE}"
    assert "s3cret" not in str(err)
    err = _refused(_job(tmp_path, "notify: {url_from: ntfy.sh/my-private-topic}\n"))
    assert "holds a URL" in err.what and "private" not in str(err)


@pytest.mark.parametrize("value,what,fix", [
    ("$HOOK", "'notify.url_from' is '$HOOK': it takes the variable's name, not its value",
     "write the name without '$': url_from: HOOK"),
    ("'${HOOK}'", "'notify.url_from' is '${HOOK}': it takes the variable's name, not its value",
     "write the name without '$': url_from: HOOK"),
    ("my hook", "'notify.url_from' is 'my hook', not the name of an environment variable",
     "give the name of the variable that holds the webhook URL (a letter or '_', then letters, "
     f"digits and '_'): {EXAMPLE}"),
    ("12", "'notify.url_from' is 12, not the name of an environment variable",
     "give the name of the variable that holds the webhook URL (a letter or '_', then letters, "
     f"digits and '_'): {EXAMPLE}"),
])
def test_url_from_errors_say_a_variable_name_is_wanted(home, tmp_path, monkeypatch, value, what,
                                                       fix):
    monkeypatch.chdir(tmp_path)
    err = _refused(_job(tmp_path, f"notify: {{url_from: {value}}}\n"))
    assert (err.what, err.fix) == (what, fix)


def test_a_notify_section_without_url_from_says_what_it_names(home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = _refused(_job(tmp_path, "notify: {format: ntfy}\n"))
    assert err.what == "missing required key 'url_from' in 'notify'"
    assert err.fix == "add url_from: NAME, the environment variable that holds the webhook URL"


# ----------------------------------------------------------------- odd reservation dates

ODD = ("ReservationName=maint StartTime=2031-02-30T12:00:00 EndTime=1969-07-20T20:17:00 "
       "Nodes=node[1-2] Flags=MAINT State=INACTIVE\n")


def test_a_reservation_with_odd_dates_is_never_before_none():
    (res,) = reservations.parse(ODD)
    assert res.start is None and res.end is None  # Feb 30th; before 1970
    why = {"category": "reservation", "reason": "ReqNodeNotAvail, Reserved for maintenance",
           "reservations": [res.shown()]}
    text, action = pending.sentence(why, "12")
    assert text == ("a reservation holds the nodes: maint (maintenance, an unknown start to an "
                    "unknown end on node[1-2])")
    assert action == "it starts after maint ends; `scontrol show reservation maint` shows its times"
    # A maintenance without a known start never collides: nothing to say "before".
    assert reservations.collision([res], None, 1, 3600) is None


def test_a_reservation_with_a_start_says_the_time_that_fits():
    (res,) = reservations.parse(ODD.replace("2031-02-30", "2031-02-28"))
    text, action = pending.sentence({"category": "reservation", "reason": "Reservation",
                                     "reservations": [res.shown()]}, "12")
    assert text.endswith("(maintenance, 2031-02-28 12:00 to an unknown end on node[1-2])")
    assert action == ("it starts after maint ends; a resources.time that ends before "
                      "2031-02-28 12:00 could start now")


# ------------------------------------------------------------------------------ snapshot

def _project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "train.py").write_text("pass\n")
    return proj


def _snapshot_of(proj: Path, monkeypatch, **job):
    monkeypatch.chdir(proj)
    doc = {"name": "t", "script": "train.py", **job}
    (proj / "job.yaml").write_text(yaml.safe_dump(doc))
    return snapshot_source(prepare(load_job(proj / "job.yaml", site="local")))


def test_an_argument_under_a_symlinked_directory_is_held_by_the_snapshot(home, tmp_path,
                                                                         monkeypatch):
    proj = _project(tmp_path)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "x.yaml").write_text("a: 1\n")
    (proj / "cfg").symlink_to(tmp_path / "configs")  # out of the tree: its content is copied
    source = _snapshot_of(proj, monkeypatch, args=["--config=cfg/x.yaml"])
    assert "cfg" in source.files and snapshot.holds(source, "cfg/x.yaml")
    assert not snapshot.holds(source, "other/x.yaml")


def test_a_file_left_out_names_the_rule_that_left_it_out(home, tmp_path, monkeypatch):
    proj = _project(tmp_path)
    (proj / "data").mkdir()
    (proj / "data" / "x.yaml").write_text("a: 1\n")
    with pytest.raises(HpctrainError) as err:
        _snapshot_of(proj, monkeypatch, args=["data/x.yaml"], snapshot={"exclude": ["data/"]})
    e = err.value
    assert e.what == ("the argument data/x.yaml is not in the code snapshot the run executes: "
                      "snapshot.exclude leaves it out ('data/')")
    assert e.fix == ("take 'data/' out of snapshot.exclude, or narrow it, or set snapshot: "
                     "false (the job then runs the live tree)")
    assert e.where == f"{proj / 'job.yaml'}:1"  # args: the first key safe_dump writes
    # The snapshot's own default ignores (no git here): said as such, not blamed on exclude.
    source = snapshot.Source(root=str(proj), rel="", method="directory", files=["train.py"],
                             bytes=5)
    assert snapshot.left_out(source, "outputs/x.yaml", Snapshot()) == (
        "the snapshot's default ignores (virtualenvs, outputs, caches) leave it out "
        "('outputs/')", "move it out of that folder, or set snapshot: false (the job then runs "
        "the live tree)")
    (proj / ".hpctrainignore").write_text("# mine\nscratch/\n")
    assert snapshot.left_out(source, "scratch/a.py", Snapshot())[0] == (
        ".hpctrainignore leaves it out (line 'scratch/')")


def test_a_symlink_loop_in_the_project_is_one_error_naming_it(home, tmp_path, monkeypatch):
    proj = _project(tmp_path)
    (proj / "a").symlink_to("b")
    (proj / "b").symlink_to("a")
    with pytest.raises(HpctrainError) as err:
        snapshot.collect(str(proj), Snapshot(), [])
    assert err.value.what == (f"the code snapshot cannot copy {proj / 'a'}: it is a symbolic "
                              "link that loops (a -> b -> ... never reaches a file)")
    assert err.value.fix == ("remove or repair the link, or leave it out: snapshot.exclude: [a] "
                             "(or a .hpctrainignore line)")
    # Left out, the rest is copied; a link to nothing is left out in silence as before.
    (proj / "gone").symlink_to("nowhere")
    source = snapshot.collect(str(proj), Snapshot(exclude=["a", "b"]), [])
    assert sorted(source.files) == ["gone", "train.py"]


# ------------------------------------------------------------------------ attach --stacks

def _run(tmp_path: Path, **extra) -> Run:
    path = tmp_path / "runs" / "t" / "r1"
    path.mkdir(parents=True)
    (path / "rank").mkdir()
    (path / "rank" / "__main__.py").write_text("")
    RunRecord(run_id="r1", name="t", site="local", backend="local", job_id="local-1",
              extra=extra).save(str(path / "run.json"))
    return Run(path)


def test_stacks_run_the_runs_own_rank_copy_with_the_jobs_interpreter(tmp_path):
    run = _run(tmp_path, python=["/opt/isaac/python.sh", "-u"])
    assert rank_command(run, "stacks", str(run.path)) == [
        "bash", "-c", 'exec /opt/isaac/python.sh -u "$@"', "hpctrain-rank",
        str(run.path / "rank"), "stacks", str(run.path)]
    # An interpreter the cluster's environment names expands on the node, as in the job script.
    run = _run(tmp_path / "b", python=["$ISAACSIM_PYTHON_EXE"])
    assert rank_command(run, "stacks")[2] == 'exec "${ISAACSIM_PYTHON_EXE}" "$@"'


def test_a_run_recorded_before_the_interpreter_was_uses_its_jobs_python(tmp_path):
    run = _run(tmp_path)
    (run.path / "job.yaml").write_text("name: t\npython: /opt/py/bin/python3 -X dev\n")
    assert rank_command(run)[2] == 'exec /opt/py/bin/python3 -X dev "$@"'
    (run.path / "job.yaml").write_text("name: t\npython: null\n")
    assert rank_command(run)[2] == 'exec python3 "$@"'  # the copy is stdlib only


@pytest.mark.parametrize("python", [[], ["-c", "x"], ["py\nthon"], "python3", [1]])
def test_a_forged_interpreter_record_is_refused(tmp_path, python):
    run = _run(tmp_path, python=python)
    with pytest.raises(HpctrainError) as err:
        rank_command(run, "stacks")
    assert err.value.what == (f"{run.path / 'run.json'}: 'extra.python' is not an interpreter "
                              "command (a list of words)")


def test_stacks_run_only_a_copy_nobody_else_can_change(tmp_path):
    run = _run(tmp_path, python=["python3"])
    own_copy(run)  # as submit writes it
    main = run.path / "rank" / "__main__.py"
    main.chmod(main.stat().st_mode | stat.S_IWGRP)
    with pytest.raises(HpctrainError) as err:
        rank_command(run, "stacks")
    assert err.value.what == (f"attach --stacks runs run r1's own copy of hpctrain's rank side "
                              f"on its nodes, but {main} can be written by others: that code "
                              "could be anybody's")
    assert err.value.fix.startswith(f"if the run is yours: chmod -R go-w {run.path / 'rank'}")
    main.chmod(0o644)
    (run.path / "rank" / "stacks.py").symlink_to("/tmp/elsewhere.py")
    with pytest.raises(HpctrainError) as err:
        own_copy(run)
    assert f"{run.path / 'rank' / 'stacks.py'} is a symbolic link" in err.value.what


def test_the_local_site_attaches_here_in_the_run_directory(tmp_path):
    run = _run(tmp_path, python=["python3"])
    assert LocalBackend().attach_command(run, "any") == [
        "bash", "-c", 'cd "$1" 2>/dev/null; exec bash -i', "hpctrain-attach", str(run.path)]
    assert LocalBackend().job_nodes(run) == []  # not running: nothing to attach to
    assert os.path.basename(rank_command(run)[4]) == "rank"

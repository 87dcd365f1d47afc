"""Hostile input on this machine, for real: payloads through torchrun and the rank side to the
program; damaged run directories and index lines met by every command; and `submit` killed with
-9 at every step of a submission."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpctrain.backends.local import processes_of
from tests.conftest import ROOT, submitted
from tests.hostile import canary_payloads, tried
from tests.operate_helpers import job_file, status_json, wait_state

ECHO = ROOT / "tests" / "programs" / "echo_rank.py"
SUBMIT_UNTIL = ROOT / "tests" / "programs" / "submit_until.py"


def test_payloads_reach_the_program_byte_exact(cli, tmp_path):
    """Every payload as an argument and as an env value, the program and the job in a directory
    whose name is hostile too: 2 ranks under real torchrun receive them exactly; nothing ran."""
    canary = tmp_path / "CANARY"
    payloads = canary_payloads(str(canary))
    weird = tmp_path / "we'ird $(touch CANARY) dir; `x`"
    weird.mkdir()
    program = weird / "echo $rank.py"
    shutil.copy(ECHO, program)
    job = weird / "job.yaml"
    env = {f"HOSTILE_{i}": p for i, p in enumerate(payloads)}
    import yaml
    job.write_text(yaml.safe_dump({
        "name": "hostile-run", "script": program.name, "args": payloads, "env": env,
        "python": sys.executable, "runs_dir": str(weird / "runs $(x) 'r'"),
        "resources": {"procs_per_node": 2, "time": "00:05:00"}}))
    tried("execution", 2 * len(payloads) + 3)
    proc = cli("submit", job.name, "--wait", cwd=weird, timeout=300)
    _, run_dir = submitted(proc.stdout)
    seen = [json.loads(p.read_text()) for p in sorted(run_dir.glob("results/rank-*.json"))]
    assert len(seen) == 2, proc.stdout
    for rank in seen:
        assert rank["argv"] == payloads
        assert {k: rank["env"].get(k) for k in env} == env
        # The job runs the copy of its code taken at submit (hpctrain/runs/snapshot.py), in the run.
        code = run_dir / "code"
        assert rank["cwd"] == str(code) and rank["script"] == str(code / program.name)
    assert (code / program.name).read_bytes() == program.read_bytes()
    assert not (code / "runs $(x) 'r'").exists()  # the runs directory is never copied
    assert not canary.exists() and not (weird / "CANARY").exists()


def _wait_gone(run_dir: Path, timeout: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout
    while processes_of(run_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    return processes_of(run_dir)


POINTS = ["before-record", "after-record", "after-index", "after-files", "after-start",
          "after-job-id", "fail-record"]


@pytest.mark.parametrize("point", POINTS)
def test_submit_killed_at_any_step_leaves_no_job_or_one_under_control(point, cli, tmp_path):
    tried("crash")
    name = f"killed-{point}"
    jf = job_file(tmp_path, name, procs=2, args=["--seconds", "120"])
    proc = subprocess.run([sys.executable, str(SUBMIT_UNTIL), point, str(jf)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    runs = list((Path(os.environ["HPCTRAIN_RUNS_DIR"]) / name).glob("*"))
    if point == "fail-record":
        assert proc.returncode == 2 and "was cancelled, so that no job runs without a record" in proc.stderr
        assert "Traceback" not in proc.stderr and not runs  # and the run directory is gone
        return
    assert proc.returncode == -9, proc.stderr
    listed = [r for r in json.loads(cli("list", "--json").stdout) if r["name"] == name]
    if point == "before-record":
        assert not listed  # nothing recorded, and nothing started:
        assert all(not processes_of(r) for r in runs)
        return
    assert len(runs) == 1, runs
    run_dir = runs[0]
    # Indexed right after its record: from then on `list` shows it.
    assert len(listed) == (0 if point == "after-record" else 1), listed
    st = status_json(cli, run_dir)
    if point in ("after-record", "after-index", "after-files"):
        assert st["state"]["state"] == "LOST" and st["state"]["done"], st
        assert "interrupted before a job was queued" in st["state"]["reason"]
        assert not processes_of(run_dir)
        return
    # The job started before the submit died: found by its run directory, and controlled.
    st = wait_state(cli, str(run_dir), {"RUNNING"})
    assert st["job"].startswith("local-"), st
    assert processes_of(run_dir)
    cli("cancel", run_dir.name)
    assert status_json(cli, run_dir)["state"]["state"] == "CANCELLED"
    assert not _wait_gone(run_dir)


# ----------------------------------------------------------------------------- damaged state

def _corruptions():
    """(name, what to do to a finished run directory)."""
    def write(rel, data):
        def go(run_dir: Path):
            path = run_dir / rel
            if path.is_dir():
                shutil.rmtree(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
        return go

    def replace_with_dir(rel):
        def go(run_dir: Path):
            path = run_dir / rel
            if path.exists() and not path.is_dir():
                path.unlink()
            path.mkdir(parents=True, exist_ok=True)
        return go

    def edit_record(**fields):
        def go(run_dir: Path):
            data = json.loads((run_dir / "run.json").read_text())
            data.update(fields)
            for key, value in list(data.items()):
                if value == "<drop>":
                    del data[key]
            (run_dir / "run.json").write_text(json.dumps(data))
        return go

    return {
        "run.json empty": write("run.json", ""),
        "run.json garbage": write("run.json", "{not json"),
        "run.json a list": write("run.json", "[1, 2, 3]"),
        "run.json null": write("run.json", "null"),
        "run.json not utf-8": write("run.json", b"\xff\xfe\x00{"),
        "run.json a directory": replace_with_dir("run.json"),
        "run.json no backend": edit_record(backend="<drop>"),
        "run.json unknown backend": edit_record(backend="pbs", final=False),
        "run.json wrong types": edit_record(nodes="two", job_id=12),
        "run.json deep": write("run.json", "[" * 100000 + "]" * 100000),
        "run.json huge": write("run.json", '{"run_id": "' + "x" * 5_000_000 + '"}'),
        "failure.json garbage": write("status/failure.json", "{{{"),
        "failure.json a list": write("status/failure.json", "[]"),
        "rank identity garbage": write("status/rank-0.json", "garbage"),
        "rank identity wrong types": write("status/rank-1.json", '{"rank": "one", "node": 5}'),
        "rank failure garbage": write("status/rank-0.failed.json", "\x00\x01"),
        "exit_code garbage": write("status/exit_code", "not a number"),
        "exit_code empty": write("status/exit_code", ""),
        "logs a file": write("logs", "not a directory"),
        "status a file": write("status", "not a directory"),
        "rank log not utf-8": write("logs/rank-0.log", b"\xff\xfe\xfd\n"),
        "progress garbage": write("status/progress-0.json", "{{{"),
        "progress wrong types": write("status/progress-1.json", '{"rank": 1, "step": "ten", "time": []}'),
        "event file garbage": write("tb/events.out.tfevents.1.node1", b"\x00\x01garbage" * 50),
        "event file a directory": write("tb/events.out.tfevents.2.node1/x", "not an event file"),
    }


COMMANDS = [["status", "{run}"], ["status", "{run}", "--json"], ["status"], ["list"],
            ["list", "--json"], ["logs", "{run}"], ["logs", "{run}", "--rank", "0"],
            ["logs", "{run}", "--node", "nowhere"], ["cancel", "{run}"], ["status", "{run}", "--ranks"],
            ["plot", "{run}"]]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One finished local run, copied for each corruption."""
    base = tmp_path_factory.mktemp("base")
    home = base / "home"
    env = dict(os.environ, HPCTRAIN_HOME=str(home), HPCTRAIN_RUNS_DIR=str(base / "runs"))
    jf = job_file(base, "healthy", procs=2, args=["--seconds", "0.2"])
    out = subprocess.run([sys.executable, "-m", "hpctrain", "submit", str(jf), "--wait"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return submitted(out.stdout)[1]


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory):
    """One finished local sweep of 2 tasks: (its home, its run directory)."""
    base = tmp_path_factory.mktemp("sweep")
    home = base / "home"
    env = dict(os.environ, HPCTRAIN_HOME=str(home), HPCTRAIN_RUNS_DIR=str(base / "runs"))
    jf = job_file(base, "swept", args=["--seconds", "0.1"], sweep={"seeds": [1, 2]})
    out = subprocess.run([sys.executable, "-m", "hpctrain", "submit", str(jf), "--wait"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return home, submitted(out.stdout)[1]


@pytest.mark.parametrize("task", ["2", "99999", "-1"])
def test_logs_of_a_task_a_sweep_does_not_have_lists_its_tasks(task, finished_sweep, cli):
    tried("cli")
    home, run_dir = finished_sweep
    proc = cli("logs", run_dir.name, "--task", task, check=False, env={"HPCTRAIN_HOME": str(home)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"has no task {task}" in proc.stderr and "tasks are 0..1" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    # (and a task it has is shown)
    assert cli("logs", run_dir.name, "--task", "1", env={"HPCTRAIN_HOME": str(home)}).stdout


def in_one_process(commands: list[list[str]]) -> list[dict]:
    """Each command's exit status and output, all run by one process (tests/cli_batch.py)."""
    proc = subprocess.run([sys.executable, "-m", "tests.cli_batch"], cwd=ROOT, text=True,
                          input=json.dumps(commands), capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("damage", sorted(_corruptions()))
def test_damaged_run_directory_never_gives_a_traceback(damage, finished_run, cli, tmp_path, home):
    healthy = finished_run
    # Two copies in this test's own index: one damaged, one healthy that must stay visible.
    index = []
    for label in ("damaged", "ok"):
        d = tmp_path / "runs" / label / healthy.name
        shutil.copytree(healthy, d)
        rec = json.loads((d / "run.json").read_text())
        rec.update(name=label, final=False)
        (d / "run.json").write_text(json.dumps(rec))
        index.append(json.dumps({"run_id": f"{label}-{healthy.name}", "path": str(d),
                                 "job_id": rec["job_id"], "name": label}))
    home.mkdir(parents=True, exist_ok=True)
    (home / "runs.jsonl").write_text("\n".join(index) + "\n")
    damaged = tmp_path / "runs" / "damaged" / healthy.name
    _corruptions()[damage](damaged)
    commands = [[a.replace("{run}", str(damaged)) for a in command] for command in COMMANDS]
    for args, answer in zip(commands, in_one_process(commands)):
        tried("state")
        assert answer["rc"] in (0, 2), (args, answer)
        assert "Traceback" not in answer["err"] + answer["out"], (args, answer["err"])
        if answer["rc"] == 2:
            assert answer["err"].startswith("error: "), answer["err"]
    listed = cli("list").stdout
    assert "ok " in listed  # the healthy run is still shown


INDEX_DAMAGE = {
    "garbage line": "not json at all\n",
    "a list": "[1, 2]\n",
    "no path": '{"run_id": "x"}\n',
    "path not a string": '{"run_id": "x", "path": 5}\n',
    "path to nowhere": '{"run_id": "x", "path": "/nonexistent/run"}\n',
    "path too long": '{"run_id": "x", "path": "/' + "a" * 5000 + '"}\n',
    "half a line": '{"run_id": "x", "pa',
    "not utf-8": "\udcff\n",
}


@pytest.mark.parametrize("damage", sorted(INDEX_DAMAGE))
def test_damaged_index_lines_are_skipped(damage, finished_run, cli, home):
    home.mkdir(parents=True, exist_ok=True)
    good = json.dumps({"run_id": finished_run.name, "path": str(finished_run), "name": "healthy"})
    text = INDEX_DAMAGE[damage]
    with open(home / "runs.jsonl", "w", errors="surrogateescape") as f:
        f.write(text + "\n" + good + "\n")
    commands = [["list"], ["status"], ["status", finished_run.name], ["logs", finished_run.name]]
    for command, answer in zip(commands, in_one_process(commands)):
        tried("state")
        assert answer["rc"] == 0 and "Traceback" not in answer["err"], (command, answer["err"])
    assert "healthy" in cli("list").stdout


def test_state_home_that_is_a_file(cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for command in (["list"], ["status"], ["status", "abc"], ["cancel", "abc"], ["logs", "abc"]):
        tried("state")
        proc = cli(*command, check=False, env={"HPCTRAIN_HOME": str(blocker)})
        assert proc.returncode == 2 and proc.stderr.startswith("error: "), (command, proc.stderr)
        assert "HPCTRAIN_HOME" in proc.stderr


BAD_ARGS = [
    (["logs", "{run}", "--rank", "99999"], "has no rank 99999", "its ranks are 0..1"),
    (["logs", "{run}", "--rank", "-1"], "has no rank -1", "its ranks are 0..1"),
    (["logs", "{run}", "--node", "nowhere"], "no rank of run", "nodes of this run: "),
    (["logs", "{run}", "--task", "3"], "has no task 3", "not a sweep"),
    (["logs", ""], "an empty RUN names no run", "hpctrain list"),
    (["cancel", ""], "an empty RUN names no run", "hpctrain list"),
    (["status", "   "], "an empty RUN names no run", "hpctrain list"),
    (["status", "x" * 10000], "no run 'xxx", "hpctrain list"),
    (["logs", "/etc"], "no run '/etc' found", "hpctrain list"),
    (["plot", ""], "an empty RUN names no run", "hpctrain list"),
    (["plot", "{run}"], "has no TensorBoard event files yet", "$HPCTRAIN_RUN_DIR"),
    (["tensorboard", "{run}", "--port", "70000"], "no port 70000", "1 to 65535"),
]


@pytest.mark.parametrize("args,what,fix", BAD_ARGS)
def test_bad_arguments_name_what_exists(args, what, fix, finished_run, cli, home):
    tried("cli")
    home.mkdir(parents=True, exist_ok=True)
    (home / "runs.jsonl").write_text(json.dumps({"run_id": finished_run.name,
                                                 "path": str(finished_run)}) + "\n")
    proc = cli(*[a.replace("{run}", finished_run.name) for a in args], check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert what in proc.stderr and fix in proc.stderr, proc.stderr
    assert len(proc.stderr) < 1000  # a 10,000-character argument is not echoed back whole

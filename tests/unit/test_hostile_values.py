"""Hostile values (issue 39, items 5 and 6): forged or odd numbers and text in a shared run
directory, in a job file and in the tools' output.

- values: a non-numeric progress metric, NaN, ±Infinity, huge numbers and negative values in
  progress reports, sampler lines and allocation records — `status`, `status --ranks`,
  `status --json`, `list`, `list --json` and `report` (text and --json) answer, each through the
  real CLI entry point (in this process): a result, or one `error:` line and exit 2, never
  "failed unexpectedly" or a traceback; a damaged run never hides the others from `list`;
- escapes: OSC/CSI sequences, BEL, C1 controls and bidi overrides in run records, metric names,
  node names, failure messages, sampler errors and job ids never reach stdout or stderr raw,
  and --json output stays valid JSON holding the data (escaped by json);
- bounds: a duration or count in a job file beyond what the nodes' sleeps, polls and ranges
  take (health.timeout: 1e9) is refused at load with its file:line;
- tools: squeue --json / scontrol / sacct output of any shape parses to records or nothing,
  never an exception; the one cleaning (rank/printable.py) keeps printable text as it is.
"""
from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpctrain.backends.slurm import records as slurm_records
from hpctrain.cli import main
from hpctrain.rank.printable import clean, printable, shown
from hpctrain.runs.records import Run, add_to_index
from tests.hostile import tried

RUN_ID = "20240101-000000-abcd"
T0 = 1_700_000_000.0
# What a terminal acts on: ESC (CSI, OSC), the one-byte CSI, BEL, a bidi override.
RAW = ("\x1b", "\x9b", "\x07", "\u202e")
ESCAPES = ["\x1b]0;owned\x07", "\x1b[2J\x1b[31m", "\x1b]52;c;cHduZWQ=\x07", "\x9b31m",
           "\x1b]8;;http://x\x07link\x1b]8;;\x07", "\u202egnp.exe", "a\x07b\x00c\x7fd\x85e"]
NUMBERS = ["NaN", "Infinity", "-Infinity", "1e308", "-1e308", str(10 ** 30), str(-10 ** 30),
           "true", '"abc"', "{}"]


def _run_dir(root: Path, files: dict | None = None, name: str = "x", run_id: str = RUN_ID,
             **fields) -> Path:
    d = root / "runs" / name / run_id
    for sub in ("status", "logs", "usage"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    rec = dict(run_id=run_id, name=name, site="local", backend="local", job_id="local-1",
               state="COMPLETED", final=True, script="job.sh", submitted="2024-01-01T00:00:00")
    rec.update(fields)
    (d / "run.json").write_text(json.dumps(rec))
    for path, text in (files or {}).items():
        (d / path).parent.mkdir(parents=True, exist_ok=True)
        (d / path).write_text(text)
    return d


def hpctrain(*argv) -> tuple[int, str, str]:
    """The CLI's main in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def answered(rc: int, out: str, err: str) -> None:
    """A result (exit 0), or one `error:` line and exit 2; never an internal error, never a raw
    escape on either stream."""
    assert "failed unexpectedly" not in err and "Traceback" not in err, err
    assert rc == 0 or (rc == 2 and err.startswith("error: ")), (rc, out, err)
    for ch in RAW:
        assert ch not in out and ch not in err, (ch, out, err)


COMMANDS = [("status",), ("status", "--ranks"), ("status", "--json"), ("report",),
            ("report", "--json")]


def _each_command(d: Path, tmp_path: Path, commands=COMMANDS) -> dict[tuple, tuple[int, str, str]]:
    out = {}
    for cmd in commands:
        extra = ("--out", tmp_path / "u.png") if cmd[0] == "report" else ()
        result = hpctrain(*cmd, d, *extra)
        answered(*result)
        if "--json" in cmd and result[0] == 0:
            json.loads(result[1])  # valid JSON (strict: no NaN, no Infinity)
        out[cmd] = result
    return out


# ----------------------------------------------------------------------------- values

def _progress(metric: str = "1.5", time: str = str(T0), step: str = "5", rate: str = "2.0",
              since: str = str(T0 - 10), attempt: str = "0", name: str = "reward") -> str:
    return (f'{{"rank": 0, "step": {step}, "time": {time}, "rate": {rate}, "since": {since}, '
            f'"attempt": {attempt}, "metrics": {{{json.dumps(name)}: {metric}, "loss": 0.5}}}}')


@pytest.mark.parametrize("field", ["metric", "time", "step", "rate", "since", "attempt"])
def test_forged_progress_numbers_never_fail_a_command(field, tmp_path, home):
    for value in NUMBERS:
        d = _run_dir(tmp_path / value.replace("/", "_"),
                     {"status/progress-0.json": _progress(**{field: value})})
        results = _each_command(d, tmp_path, COMMANDS[1:])  # `status` is a part of --ranks
        rc, out, _ = results[("status", "--ranks")]
        assert rc == 0 and RUN_ID in out
        tried("forged progress value")


def test_a_non_numeric_metric_is_left_out_and_the_rest_shown(tmp_path, home):
    d = _run_dir(tmp_path, {"status/progress-0.json": _progress(metric='"xyzzy"')})
    rc, out, err = hpctrain("status", "--ranks", d)
    answered(rc, out, err)
    assert "step 5" in out and "loss=0.5" in out and "xyzzy" not in out
    # NaN (a diverged training) is carried as null: JSON without NaN.
    d = _run_dir(tmp_path / "nan", {"status/progress-0.json": _progress(metric="NaN")})
    rc, out, err = hpctrain("status", "--json", d)
    answered(rc, out, err)
    assert json.loads(out)["progress"][0]["metrics"] == {"reward": None, "loss": 0.5}


def test_list_shows_every_run_when_one_is_forged(tmp_path, home):
    """One run's non-numeric metric once made `list` show no run at all."""
    good = _run_dir(tmp_path, {"status/progress-0.json": _progress()}, run_id="20240101-000000-good")
    bad = _run_dir(tmp_path, {"status/progress-0.json": _progress(metric='"abc"', time="-Infinity")},
                   run_id="20240101-000000-bad0")
    odd = _run_dir(tmp_path, {"status/progress-0.json": _progress(name="\x1b]0;x\x07reward")},
                   run_id="20240101-000000-odd0", reason="\x1b[2J", state="FAILED", exit_code=3)
    for d in (good, bad, odd):
        add_to_index(Run(d))
    for argv in (("list",), ("status",), ("list", "--json")):
        rc, out, err = hpctrain(*argv)
        answered(rc, out, err)
        for d in (good, bad, odd):
            assert d.name in out, (argv, out)
    rows = json.loads(hpctrain("list", "--json")[1])
    assert {r["run_id"] for r in rows} == {good.name, bad.name, odd.name}


def _usage(*lines) -> str:
    return "\n".join(json.dumps(x) if not isinstance(x, str) else x for x in lines) + "\n"


FORGED_USAGE = {
    "peak and power as text": _usage(
        {"kind": "start", "time": T0, "job_id": "12", "attempt": 0, "cpus": 4},
        {"kind": "gpu", "index": 0, "uuid": "GPU-1", "mem_total": "x", "peak": "big", "power": "p"},
        {"t": T0 + 10, "g": [[0, 50, 100, 200]]}),
    "huge values": _usage(
        {"kind": "start", "time": T0, "job_id": "12", "attempt": 0},
        {"t": T0 + 10, "g": [[0, 1e308, 1e308, 1e308]]},
        {"t": T0 + 20, "r": [[0, 1e308, 1e308]]},
        {"kind": "end", "time": 1e308, "cpu_s": 1e308, "wall_s": 1e-300}),
    "huge times and counts": _usage(
        {"kind": "start", "time": -1e308, "job_id": "12", "attempt": 10 ** 30},
        {"kind": "start", "time": T0, "job_id": "12", "attempt": 10 ** 30},
        {"kind": "start", "time": T0, "job_id": "12", "attempt": 0},
        {"t": 1e308, "g": [[10 ** 30, 50, 1, 1]]}, {"t": T0 + 5, "r": [[10 ** 30, 50, 1]]},
        {"kind": "first_step", "time": -1e308}),
    "negative": _usage(
        {"kind": "start", "time": T0, "job_id": "12", "attempt": 0, "cpus": -4},
        {"t": T0 + 5, "g": [[-1, -50, -1, -5]]}, {"t": T0 + 5, "r": [[-1, -50, -1]]},
        {"t": -5, "g": [[0, 50, 1, 1]]}),
    "non-finite": "\n".join([
        json.dumps({"kind": "start", "time": T0, "job_id": "12", "attempt": 0}),
        '{"t": NaN, "g": [[0, NaN, Infinity, -Infinity]]}',
        '{"t": 1700000010, "g": [[0, NaN, Infinity, -Infinity]], "r": [[0, NaN, Infinity]]}',
        '{"kind": "end", "time": Infinity, "cpu_s": NaN, "wall_s": Infinity}', "not json", "[]"]),
}


@pytest.mark.parametrize("case", sorted(FORGED_USAGE))
def test_forged_sampler_lines_never_fail_report(case, tmp_path, home):
    d = _run_dir(tmp_path, {"usage/n1.jsonl": FORGED_USAGE[case]})
    results = _each_command(d, tmp_path)
    assert results[("report",)][0] == 0
    tried("forged sampler line")


@pytest.mark.parametrize("alloc", [{"gpus": 10 ** 30, "cpus": -4}, {"gpus": -3, "cpus": 0.5},
                                   {"gpus": True, "cpus": 10 ** 30}, {"gpus": "8"}, [1, 2]])
def test_forged_allocation_records_never_fail_report(alloc, tmp_path, home):
    d = _run_dir(tmp_path, {
        "usage/n1.jsonl": _usage({"kind": "start", "time": T0, "job_id": "12", "attempt": 0},
                                 {"t": T0 + 3600, "g": [[0, 50, 1, 1]]},
                                 {"t": T0 + 3600, "r": [[0, 50, 1]]}),
        "status/allocation-12-0.json": json.dumps(alloc)})
    rc, out, _ = _each_command(d, tmp_path, [("report",)])[("report",)]
    assert rc == 0 and "attempt 0 (job 12)" in out
    tried("forged allocation record")


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.dictionaries(st.sampled_from(["kind", "time", "t", "job_id", "attempt", "g",
                                                  "r", "index", "uuid", "mem_total", "cpus",
                                                  "cpu_s", "wall_s", "error"]),
                                st.one_of(st.sampled_from(["start", "gpu", "end", "error",
                                                           "first_step"]),
                                          st.floats(), st.integers(), st.text(max_size=8),
                                          st.lists(st.lists(st.one_of(st.integers(), st.floats()),
                                                            max_size=4), max_size=3))),
                max_size=8))
def test_any_sampler_lines_give_a_report(tmp_path_factory, lines):
    """Hypothesis: any JSON values in any sampler line's keys (NaN and infinities included),
    read as `report` reads them (the picture is drawn from such lines in the cases above)."""
    from hpctrain.follow.report import as_json, directory_report, text
    tmp = tmp_path_factory.mktemp("h")
    d = _run_dir(tmp, {"usage/n1.jsonl": "\n".join(json.dumps(x) for x in lines)})
    result = directory_report(str(d), RUN_ID, "x")
    answered(0, text(result), "")
    json.loads(as_json(result))
    tried("generated sampler line")


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.fixed_dictionaries({"rank": st.integers(), "step": st.integers(),
                              "time": st.floats(), "since": st.floats(),
                              "rate": st.one_of(st.none(), st.floats()),
                              "attempt": st.integers(),
                              "metrics": st.dictionaries(st.text(max_size=6), st.one_of(
                                  st.floats(), st.integers(), st.text(max_size=3), st.none()),
                                  max_size=3)}))
def test_any_progress_report_gives_a_status(tmp_path_factory, report):
    tmp = tmp_path_factory.mktemp("p")
    d = _run_dir(tmp, {"status/progress-0.json": json.dumps(report)})
    for argv in (("status", "--ranks", d), ("status", "--json", d)):
        rc, out, err = hpctrain(*argv)
        answered(rc, out, err)
        assert rc == 0
        if "--json" in argv:
            json.loads(out)
    tried("generated progress report")


# ----------------------------------------------------------------------------- escapes

def _escape_files(text: str) -> dict:
    return {
        "status/progress-0.json": json.dumps({"rank": 0, "step": 5, "time": T0, "metrics": {
            f"{text}reward": 1.0, f"loss{text}": 2.0}}),
        "status/rank-0.json": json.dumps({"rank": 0, "local_rank": 0, "world_size": 1,
                                          "local_world_size": 1, "node": f"n1{text}"}),
        "status/rank-0.failed.json": json.dumps({"rank": 0, "node": f"n1{text}",
                                                 "exit_status": 1, "error": f"boom{text}"}),
        "status/failure.json": json.dumps({"reason": f"ranks{text}", "exit_status": 1,
                                           "message": f"m{text}", "nodes": [f"n{text}"]}),
        "status/failures.jsonl": json.dumps({"reason": f"hang{text}", "exit_status": 1,
                                             "message": f"m{text}"}) + "\n",
        "status/excluded.json": json.dumps([{"node": f"n{text}", "reason": f"r{text}",
                                             "message": f"m{text}"}]),
        "usage/n1.jsonl": _usage(
            {"kind": "start", "time": T0, "job_id": f"12{text}", "attempt": 0},
            {"kind": "gpu", "index": 0, "uuid": f"GPU{text}", "mem_total": 80000},
            {"t": T0 + 10, "g": [[0, 50, 100, 200]]},
            {"kind": "error", "time": T0, "error": f"nvidia-smi said {text}"}),
    }


@pytest.mark.parametrize("text", ESCAPES, ids=range(len(ESCAPES)))
def test_no_escape_reaches_the_terminal(text, tmp_path, home):
    d = _run_dir(tmp_path, _escape_files(text), state="CANCELLED", reason=f"why{text}",
                 array_size=None, submitted=f"2024{text}")
    results = _each_command(d, tmp_path)
    rc, out, _ = results[("status", "--ranks")]
    assert rc == 0 and "reward" in out and "n1" in out and "boom" in out
    # --json: the data is all there, escaped by json (\u001b), not cut or replaced.
    data = json.loads(results[("status", "--json")][1])
    assert data["failures"][0]["error"] == f"boom{text}"
    assert f"{text}reward" in data["progress"][0]["metrics"]
    report = json.loads(results[("report", "--json")][1])
    assert report["errors"] == [f"n1: nvidia-smi said {text}"]
    add_to_index(Run(d))
    answered(*hpctrain("list"))
    tried("terminal escape", len(COMMANDS) + 1)


def test_a_sweeps_task_values_and_states_are_shown_clean(tmp_path, home):
    d = _run_dir(tmp_path, array_size=2, task_values=[{"k\x1b[31m": "v\x1b]0;x\x07"}, {"a": 1}],
                 task_states=[["1_0", "COMPLETED", 0], ["1_1", "FAILED", 1]])
    rc, out, err = hpctrain("status", d)
    answered(rc, out, err)
    assert "k?[31m=v?]0;x?" in out


def test_the_error_line_is_clean(tmp_path, home):
    """An error that quotes a file's text (here a damaged run.json's state)."""
    d = _run_dir(tmp_path, state="RUN\x1b]0;x\x07")
    rc, out, err = hpctrain("status", d)
    answered(rc, out, err)
    assert rc == 2


# ----------------------------------------------------------------------------- bounds

@pytest.mark.parametrize("key,value", [
    ("health.timeout", "1000000000"), ("launcher.hang_timeout", "100000000000000000000"),
    ("launcher.monitor_interval", "1.0e+300"), ("launcher.join_timeout", "9999999999"),
    ("preemption.grace", "10000000000"), ("idle_gpus.for", "9999999h"),
    ("resources.nodes", "1000000000000"), ("resources.procs_per_node", "1000000000"),
    ("health.slow_rank_window", "3000000")])
def test_durations_and_counts_are_bounded_at_load(key, value, tmp_path, home):
    (tmp_path / "train.py").write_text("")
    section, name = key.split(".")
    job = tmp_path / "job.yaml"
    job.write_text(f"name: t\nscript: {tmp_path / 'train.py'}\n{section}:\n  {name}: {value}\n")
    rc, out, err = hpctrain("validate", job, "--site", "slurm-generic")
    answered(rc, out, err)
    assert rc == 2 and f"{job}:" in err and len(err.splitlines()) <= 2, err
    tried("unbounded duration or count")


# ----------------------------------------------------------------------------- tools

@settings(max_examples=40, deadline=None)
@given(st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                              st.text(max_size=10)),
                    lambda inner: st.one_of(st.lists(inner, max_size=4),
                                            st.dictionaries(st.sampled_from([
                                                "jobs", "errors", "job_id", "array_job_id",
                                                "array_task_id", "array_task_string",
                                                "job_state", "exit_code", "nodes", "node_count",
                                                "start_time", "end_time", "restart_cnt",
                                                "state_reason", "standard_output"]), inner,
                                                max_size=6)), max_leaves=20))
def test_any_squeue_json_gives_records_or_an_error(data):
    text = json.dumps(data)
    if slurm_records.squeue_errors(text):
        return  # the backend raises SchedulerError with these: "cannot reach slurm: ..."
    for rec in slurm_records.parse_squeue_json(text):
        assert rec.job_id.isdigit() and len(rec.pending_tasks) <= slurm_records.MAX_TASKS
        rec.elapsed(T0)
    tried("generated squeue --json")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(list("0123456789-:,%[]|=x ²\n\x1b") +
                               ["JobId=", "ArrayTaskId=", "NumNodes=", "Restarts=",
                                "ExitCode=", "StartTime=", "ArrayJobId=5 "]),
                max_size=40).map("".join))
def test_any_scontrol_or_sacct_text_parses(text):
    for rec in slurm_records.parse_scontrol(text) + slurm_records.parse_sacct(text):
        assert len(rec.pending_tasks) <= slurm_records.MAX_TASKS
        rec.elapsed(T0)
    tried("generated scontrol/sacct text")


def test_array_expressions_are_bounded():
    assert slurm_records.expand_tasks("0-3%2") == (0, 1, 2, 3)
    assert slurm_records.expand_tasks("1,4-6") == (1, 4, 5, 6)
    assert slurm_records.expand_tasks("0-10:5") == (0, 5, 10)
    assert len(slurm_records.expand_tasks("0-999999999")) == slurm_records.MAX_TASKS
    assert slurm_records.expand_tasks("a-b") == slurm_records.expand_tasks("²") == ()
    assert slurm_records.squeue_errors("[1, 2]") and slurm_records.squeue_errors("{\"jobs\": 5}")


def test_non_utf8_from_nvidia_smi_is_still_a_count(tmp_path):
    from hpctrain.job.checks import local_gpus
    smi = tmp_path / "nvidia-smi"
    smi.write_bytes(b"#!/bin/sh\nprintf 'GPU 0: \\377\\376 (UUID: x)\\nGPU 1: \\033]0;x\\007\\n'\n")
    smi.chmod(0o755)
    assert local_gpus({"PATH": str(tmp_path)}) == (2, "nvidia-smi -L")


# ----------------------------------------------------------------------------- the cleaning

def test_the_one_cleaning():
    assert printable("é中🙂 a-b_c") == "é中🙂 a-b_c"  # printable text is kept as it is
    assert printable("a\x1b[31mb\x9bc\x07d\u202ee\u2028f\tg") == "a?[31mb?c?d?e?f?g"
    assert shown("a\x1b\nb\r") == "a?\nb?"  # lines kept, a carriage return is not
    assert clean("  x\x1b  ") == "x?" and clean("") is None and len(clean("y" * 500)) == 200


@given(st.text())
@settings(max_examples=100)
def test_cleaned_text_holds_nothing_a_terminal_acts_on(text):
    out = shown(text)
    assert all(c.isprintable() or c == "\n" for c in out)
    assert len(printable(text)) == len(text)  # one '?' for one character: columns stay
    assert not math.isnan(len(out))

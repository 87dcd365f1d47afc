"""Hostile run directories, round 4 (issue 39, items 3, 4 and 7): what a shared run directory
holds can neither redirect a write nor stall or exhaust a read.

- links:   a symbolic link at the file hpctrain writes (plots/usage.png, run.json, status
           records, failures.jsonl, a usage file, logs/job.out), at the folder it writes into
           (plots/, status/), and a hard link of another file — refused, the other file intact;
- pipes:   a named pipe at every path written and read — refused at once with an error that
           says what it is (never "cannot write …: None"), never a hang;
- sizes:   a sparse 3 GiB sample file with no newline, forty hard links of one large sample
           file, forty of one large rank record — read within their bounds, what came first kept;
- tools:   a stand-in tool that prints without end (nvidia-smi -L, the health gate's query, a
           scheduler command) — stopped at the cap at once, an answer or an error;
- formats: `report --out x.pdf` writes a PDF, and `plot` and `report` share one rule: the
           extension's format where matplotlib writes it, else an error listing the formats.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from hpctrain.errors import HpctrainError
from hpctrain.rank import records, tools
from hpctrain.runs.records import Run
from hpctrain.runs.untrusted import Budget, read_lines, writing
from tests.hostile import tried, within

RUN_ID = "20240101-000000-abcd"
VICTIM = b"the reader's own file\n"




def _run_dir(tmp_path: Path, **fields) -> Path:
    d = tmp_path / "runs" / "x" / RUN_ID
    (d / "status").mkdir(parents=True, exist_ok=True)
    (d / "logs").mkdir(exist_ok=True)
    rec = dict(run_id=RUN_ID, name="x", site="local", backend="local", job_id="local-1",
               state="COMPLETED", final=True, script="job.sh")
    rec.update(fields)
    (d / "run.json").write_text(json.dumps(rec))
    return d


def _victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim"
    v.mkdir(exist_ok=True)
    (v / "file").write_bytes(VICTIM)
    return v / "file"


def _plant(path: Path, kind: str, victim: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "hardlink":
        os.link(victim, path)


def _untouched(victim: Path, content: bytes = VICTIM) -> None:
    assert victim.read_bytes() == content
    assert sorted(p.name for p in victim.parent.iterdir()) == ["file"]


# ----------------------------------------------------------------------------- writes

def _writers(d: Path) -> dict[str, tuple[str, object]]:
    """name -> (the path it writes, relative to the run directory; a call that writes it)."""
    status = str(d / "status")
    return {
        "plots/usage.png": ("plots/usage.png", lambda: _save_figure(d / "plots" / "usage.png", d)),
        "run.json": ("run.json", lambda: Run(d).update(cancelled=1.0)),
        "status/rank-0.json": ("status/rank-0.json", lambda: records.write_identity(
            status, records.RankIdentity(rank=0, local_rank=0, world_size=1, local_world_size=1,
                                         node="n"))),
        "status/failure.json": ("status/failure.json", lambda: records.write_job_failure(
            str(d), records.JobFailure(reason="ranks", exit_status=1, message="m"))),
        "status/failures.jsonl": ("status/failures.jsonl", lambda: _archive(d)),
        "usage/n.jsonl": ("usage/n.jsonl", lambda: records.open_append(
            str(d / "usage" / "n.jsonl"), str(d), "a").close()),
        "logs/rank-0.log": ("logs/rank-0.log", lambda: records.open_append(
            str(d / "logs" / "rank-0.log"), str(d)).close()),
    }


def _save_figure(path: Path, root: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from hpctrain.follow.plot import save
    fig = Figure(figsize=(1, 1))
    FigureCanvasAgg(fig)
    save(fig, str(path), "png", str(root))


def _archive(d: Path) -> None:
    records.write_job_failure(str(d), records.JobFailure(reason="ranks", exit_status=1, message="m"))
    records.archive_job_failure(str(d))


WRITERS = sorted(_writers(Path("/")))


@pytest.mark.parametrize("kind", ["symlink", "fifo", "hardlink"])
@pytest.mark.parametrize("name", WRITERS)
def test_no_write_goes_through_a_planted_file(name, kind, tmp_path, home):
    d = _run_dir(tmp_path)
    victim = _victim(tmp_path)
    rel, write = _writers(d)[name]
    if kind == "hardlink" and rel == "run.json":
        return  # run.json is read first: replaced, its other name keeps the old bytes (below)
    content = VICTIM
    if rel == "run.json" and kind == "symlink":  # a link to a record: read, never written
        content = (d / rel).read_bytes()
        victim.write_bytes(content)
    _plant(d / rel, kind, victim)
    tried("links" if kind != "fifo" else "fifos")
    with within(5):
        try:
            write()
        except (HpctrainError, OSError) as exc:
            said = str(exc)
            assert said and "None" not in said, said
            if kind == "fifo":
                assert "named pipe" in said, said
            elif kind == "symlink":
                assert "symbolic link" in said, said
            else:
                assert "hard link" in said or "names" in said, said
        else:
            # Written anew beside it (replaced, never through it): only a hard link may be.
            assert kind == "hardlink" and not (d / rel).samefile(victim), (name, kind)
    _untouched(victim, content)


@pytest.mark.parametrize("folder", ["plots", "status", "usage", "logs"])
def test_a_linked_folder_of_the_run_directory_is_never_written_into(folder, tmp_path, home):
    d = _run_dir(tmp_path)
    victim = _victim(tmp_path)
    target = d / folder
    if target.exists():
        target.rmdir()
    target.symlink_to(victim.parent, target_is_directory=True)
    for name, (rel, write) in _writers(d).items():
        if not rel.startswith(folder + "/"):
            continue
        tried("links")
        with pytest.raises((HpctrainError, OSError), match="symbolic link|not a directory"):
            write()
    _untouched(victim)


def test_run_json_replaced_not_written_through_its_hard_link(tmp_path, home):
    d = _run_dir(tmp_path)
    other = tmp_path / "other.json"
    os.link(d / "run.json", other)
    before = other.read_bytes()
    Run(d).update(cancelled=1.0)
    assert other.read_bytes() == before and Run(d).record.cancelled == 1.0


def test_the_helper_writes_what_it_is_given_and_leaves_no_temporary(tmp_path):
    d = _run_dir(tmp_path)
    with writing(d / "plots" / "a.bin", d) as f:
        f.write(b"abc")
    records.write_json(str(d / "status" / "deep" / "x.json"), {"a": 1}, root=str(d))
    assert (d / "plots" / "a.bin").read_bytes() == b"abc"
    assert json.loads((d / "status" / "deep" / "x.json").read_text()) == {"a": 1}
    assert not [p for p in d.rglob("*.tmp")]
    with pytest.raises(HpctrainError, match="named pipe"):
        os.mkfifo(d / "plots" / "b.png")
        with writing(d / "plots" / "b.png", d) as f:
            f.write(b"never")
    assert not [p for p in d.rglob("*.tmp")]


def test_report_refuses_a_fifo_or_link_at_its_picture(tmp_path, home):
    from hpctrain.follow.report import report
    d = _usage_run(tmp_path)
    victim = _victim(tmp_path)
    for kind in ("fifo", "symlink"):
        _plant(d / "plots" / "usage.png", kind, victim)
        tried("fifos" if kind == "fifo" else "links")
        with within(10), pytest.raises(HpctrainError) as info:
            report(Run(d))
        said = str(info.value)
        assert "usage.png" in said and ("named pipe" if kind == "fifo" else "symbolic link") in said
        assert "None" not in said
    _untouched(victim)
    (d / "plots" / "usage.png").unlink()
    assert report(Run(d)).plot == str(d / "plots" / "usage.png")
    assert (d / "plots" / "usage.png").read_bytes().startswith(b"\x89PNG")


# ----------------------------------------------------------------------------- formats

def _usage_run(tmp_path: Path) -> Path:
    d = _run_dir(tmp_path)
    (d / "usage").mkdir()
    lines = [{"kind": "start", "time": 1000.0, "node": "n"}]
    lines += [{"t": 1000.0 + i, "g": [[0, 50.0 + i]]} for i in range(5)]
    (d / "usage" / "n.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return d


@pytest.mark.parametrize("ext,magic", [("pdf", b"%PDF"), ("svg", b"<?xml"), ("png", b"\x89PNG"),
                                       ("", b"\x89PNG")])
def test_report_out_writes_the_format_its_extension_names(ext, magic, tmp_path, home):
    from hpctrain.follow.report import report
    d = _usage_run(tmp_path)
    out = tmp_path / "out" / ("usage." + ext if ext else "usage")
    assert report(Run(d), str(out)).plot == str(out)
    assert out.read_bytes().startswith(magic)


@pytest.mark.parametrize("which", ["report", "plot"])
def test_an_extension_matplotlib_cannot_write_is_refused_listing_the_formats(which, tmp_path, home):
    from hpctrain.follow.plot import plot
    from hpctrain.follow.report import report
    d = _usage_run(tmp_path)
    out = tmp_path / "usage.doc"
    with pytest.raises(HpctrainError) as info:
        (report if which == "report" else plot)(Run(d), **({"out": str(out)}))
    said = f"{info.value} {info.value.fix}"
    assert ".doc" in said and ".pdf" in said and ".svg" in said and ".png" in said, said
    assert not out.exists()


# ----------------------------------------------------------------------------- reads

def test_a_sparse_sample_file_without_a_newline_costs_one_line(tmp_path):
    from hpctrain.follow.report import read_usage
    d = _usage_run(tmp_path)
    path = d / "usage" / "n.jsonl"
    kept = len(path.read_text().splitlines())
    os.truncate(path, 3 << 30)  # 3 GiB of NULs after the good lines, no newline: costs nothing
    tried("sizes")
    with within(5):
        usage = read_usage(str(d))
    assert len(usage["n"]) == kept


def test_forty_hard_links_of_one_sample_file_share_one_bound(tmp_path, monkeypatch):
    from hpctrain.follow import report
    d = _run_dir(tmp_path)
    (d / "usage").mkdir()
    line = json.dumps({"t": 1.0, "g": [[0, 50.0]]}) + "\n"
    (d / "usage" / "a.jsonl").write_text(line * 2000)
    for i in range(40):
        os.link(d / "usage" / "a.jsonl", d / "usage" / f"b{i:02d}.jsonl")
    size = len(line) * 2000
    monkeypatch.setattr(report, "MAX_USAGE_BYTES", 3 * size)  # one file's bound, 40 files
    tried("sizes")
    got = sum(len(v) for v in report.read_usage(str(d)).values())
    assert 2000 <= got <= 3 * 2000
    monkeypatch.setattr(report, "MAX_USAGE_BYTES", 100 * size)
    monkeypatch.setattr(report, "MAX_SAMPLES", 5000)
    assert sum(len(v) for v in report.read_usage(str(d)).values()) <= 5000


def test_forty_hard_links_of_one_rank_record_share_one_bound(tmp_path, monkeypatch):
    d = _run_dir(tmp_path)
    big = {"rank": 0, "step": 1, "time": 1.0, "metrics": {f"m{i}": float(i) for i in range(2000)}}
    (d / "status" / "progress-0.json").write_text(json.dumps(big))
    size = (d / "status" / "progress-0.json").stat().st_size
    for r in range(1, 41):
        os.link(d / "status" / "progress-0.json", d / "status" / f"progress-{r}.json")
    monkeypatch.setattr(records, "MAX_RANK_BYTES", 5 * size)
    tried("sizes")
    assert len(records.read_progress(str(d))) == 5
    monkeypatch.setattr(records, "MAX_RANK_RECORD", size - 1)
    assert records.read_progress(str(d)) == []  # each over its own bound


def test_read_lines_is_bounded_in_bytes_lines_and_line_length(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"a\n" * 100 + b"x" * 5000 + b"\nb\n")
    assert list(read_lines(p, max_line=10)) == [b"a"] * 100  # the overlong line ends it
    assert list(read_lines(p, max_lines=7)) == [b"a"] * 7
    assert list(read_lines(p, limit=20)) == [b"a"] * 10
    budget = Budget(limit=30)
    with pytest.raises(OSError, match="has read"):
        list(read_lines(p, budget)) and list(read_lines(p, budget))
    os.mkfifo(tmp_path / "pipe")
    with within(5), pytest.raises(OSError, match="named pipe"):
        list(read_lines(tmp_path / "pipe"))


READ_PATHS = ["status/pid", "status/stopped.json", "job.yaml", "bootstrap.json",
              "status/idle-n.json", "status/progress-0.json", "usage/n.jsonl"]


@pytest.mark.parametrize("rel", READ_PATHS)
def test_a_fifo_at_any_path_read_never_hangs(rel, tmp_path, home):
    from hpctrain.backends.local import LocalBackend, _stopped, processes_of
    from hpctrain.follow.report import read_usage
    from hpctrain.rank.during import sampler
    from hpctrain.submission import _max_excluded
    d = _run_dir(tmp_path)
    (d / rel).parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(d / rel)
    steps = {
        "status/pid": [lambda: processes_of(d), lambda: LocalBackend().adopt(Run(d))],
        "status/stopped.json": [lambda: _stopped(d)],
        "job.yaml": [lambda: _max_excluded(Run(d))],
        "bootstrap.json": [lambda: sampler._settings(str(d))],
        "status/idle-n.json": [lambda: _idle_check(d)],
        "status/progress-0.json": [lambda: records.read_progress(str(d))],
        "usage/n.jsonl": [lambda: read_usage(str(d))],
    }[rel]
    for step in steps:
        tried("fifos")
        with within(5):
            try:
                step()
            except (HpctrainError, OSError, ValueError) as exc:
                assert "pipe" in str(exc) or "regular" in str(exc), exc


def _idle_check(d: Path) -> None:
    from hpctrain.rank.during import sampler
    s = sampler.Sampler.__new__(sampler.Sampler)
    s.run_dir, s.status, s.node, s.nnodes = str(d), str(d / "status"), "n", 2
    s.idle, s.stopped, s.first_step, s.idle_since = {"below": 5, "for": 1}, False, True, 0.0
    s.job_id, s.attempt = "", 0
    s.check_idle(100.0, [0.0])


# ----------------------------------------------------------------------------- tools

def _endless(tmp_path: Path, name: str = "nvidia-smi") -> Path:
    """A stand-in tool that prints without end (and would for ever)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    tool = bindir / name
    tool.write_text("#!/bin/sh\nexec yes 'GPU 0: NVIDIA H100 (UUID: GPU-x)'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return tool


def test_a_tool_that_prints_without_end_is_stopped_at_the_cap(tmp_path):
    tool = _endless(tmp_path)
    tried("tools")
    with within(5), pytest.raises(tools.ToolOutputTooLarge, match="printed more than 1 MiB"):
        tools.run([str(tool)], timeout=60, limit=1 << 20)


def test_nvidia_smi_l_that_prints_without_end_is_an_answer(tmp_path):
    from hpctrain.job.checks import local_gpus
    _endless(tmp_path)
    tried("tools")
    with within(5):
        count, how = local_gpus({"PATH": str(tmp_path / "bin")})
    assert count is None and "printed more than" in how


def test_the_health_gate_and_probe_stop_an_endless_nvidia_smi(tmp_path, monkeypatch):
    from hpctrain.rank.before import health, probe
    tool = _endless(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "bin") + os.pathsep + os.environ["PATH"])
    tried("tools", 2)
    with within(5):
        code, said = health._query_tool(["-L"], 60, str(tool))
        facts = probe.gpus()
    assert code == 125 and "printed more than" in said
    assert facts["gpus"] == [] and "printed more than" in facts["error"]


def test_a_scheduler_tool_that_prints_without_end_is_a_scheduler_error(tmp_path):
    from hpctrain.backends.commands import SchedulerError, run
    tool = _endless(tmp_path, "squeue")
    tried("tools")
    with within(5), pytest.raises(SchedulerError, match="printed more than"):
        run([str(tool)])
    assert run(["sh", "-c", "printf 'a\\377b'"]) == "a\ufffdb"  # bytes a tool printed, never a crash


def test_doctors_check_program_writes_through_the_one_writer(tmp_path):
    """rank/before/check.py runs as a program, outside the package: its record still goes
    through records.write_json, which refuses a doctor/ planted as a link."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "_check_under_test", Path(__file__).resolve().parents[2] / "hpctrain/rank/before/check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    records = check._records()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "doctor").symlink_to(elsewhere)
    with pytest.raises(OSError, match="symbolic link"):
        records.write_json(str(run / "doctor" / "rank-0.json"), {"rank": 0}, root=str(run))
    assert list(elsewhere.iterdir()) == []

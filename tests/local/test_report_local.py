"""Issue 31 on this machine: a real rsl-rl training (real torchrun, 2 ranks on CPU) beside a
stand-in nvidia-smi (tests/fakes/nvidia-smi: the real csv format, streamed with -lms from the
real sampled fixture). The launch step's one sampler records the stream; `hpctrain report`'s
numbers are those of the stream; an idle stream stops the run with its save; nothing of the
sampler outlives the job."""
from __future__ import annotations

import json
import math
import os
import signal
import sys
from pathlib import Path

from tests.conftest import ROOT, submitted
from tests.local.test_local_signals import _alive, _done, _wait_for

FAKES = ROOT / "tests" / "fakes"


def _env(monkeypatch, tmp_path, util: str) -> None:
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SMI_GPUS", "2")
    monkeypatch.setenv("FAKE_SMI_UTIL", util)
    monkeypatch.setenv("FAKE_SMI_ECHO", str(tmp_path / "echo.csv"))
    monkeypatch.setenv("FAKE_SMI_PIDS", str(tmp_path / "smi.pids"))


def _submit(cli, *sets: str) -> Path:
    args = ["submit", ROOT / "examples/rl/rsl_rl_pendulum.yaml", "--site", "local",
            "--set", "resources.nodes=1", "--set", f"python={sys.executable}",
            "--set", "sample_every=0.3"]
    for s in sets:
        args += ["--set", s]
    _, run_dir = submitted(cli(*args, cwd=ROOT).stdout)
    return run_dir


def _p10(values):
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.1 * len(ordered)) - 1)]


def _no_sampler_left(run_dir: Path, tmp_path: Path) -> None:
    starts = [json.loads(line) for f in run_dir.glob("usage/*.jsonl")
              for line in f.read_text().splitlines() if '"start"' in line]
    assert len(starts) == 1  # one sampler for the node, not one per rank
    pids = [starts[0]["pid"]] + [int(p) for p in (tmp_path / "smi.pids").read_text().split()]
    assert len(pids) == 2 and not any(_alive(p) for p in pids)


def test_report_matches_the_streamed_samples(cli, tmp_path, monkeypatch):
    _env(monkeypatch, tmp_path, "12,87,40,3,65,99,20")
    run_dir = _submit(cli, "args=[--updates,30,--sleep,0.1,--num-envs,8,--steps,16]")
    st = _done(cli, run_dir.name)
    assert st["state"]["state"] == "COMPLETED", st
    _no_sampler_left(run_dir, tmp_path)

    lines = [json.loads(x) for x in next(run_dir.glob("usage/*.jsonl")).read_text().splitlines()]
    ticks = [x["g"] for x in lines if "g" in x]
    assert len(ticks) >= 3
    # What the sampler recorded is the stand-in's stream, tick for tick (a prefix of it).
    echo = [[p.strip() for p in line.split(",")]
            for line in (tmp_path / "echo.csv").read_text().splitlines()]
    streamed = [echo[i:i + 2] for i in range(0, len(echo), 2)][:len(ticks)]
    for tick, rows in zip(ticks, streamed):
        assert tick == [[int(r[0]), float(r[2]), float(r[3]), float(r[5])] for r in rows]

    proc = cli("report", run_dir.name, "--json", "--out", str(tmp_path / "usage.png"))
    report = json.loads(proc.stdout)
    for gpu in (0, 1):
        utils = [float(rows[gpu][2]) for rows in streamed]
        got = next(g for g in report["gpus"] if g["index"] == gpu)
        assert got["samples"] == len(utils)
        assert math.isclose(got["mean_util"], sum(utils) / len(utils))
        assert got["p10_util"] == _p10(utils)
        assert got["mem_peak_mib"] == max(float(rows[gpu][3]) for rows in streamed)
        assert got["mem_total_mib"] == 81559.0 and got["uuid"].startswith("GPU-c1f2461c")
    start = next(x for x in lines if x.get("kind") == "start")["time"]
    end = max([x["t"] for x in lines if "t" in x] + [x["time"] for x in lines if x.get("kind") == "end"])
    (attempt,) = report["attempts"]
    assert attempt["gpus"] == 2 and attempt["gpus_source"] == "samples"
    assert math.isclose(report["gpu_hours_allocated"], 2 * (end - start) / 3600)
    means = [g["mean_util"] for g in report["gpus"]]
    assert math.isclose(report["gpu_hours_used"], sum(means) / 100 * (end - start) / 3600)
    assert report["steps_per_s"] and report["step"] >= 29
    assert attempt["first_step_s"] is not None and report["lost_between_attempts_s"] == 0
    assert (tmp_path / "usage.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print("sampler cost (% of one core, incl. the stand-in nvidia-smi):", report["sampler_cpu_pct"])
    text = cli("report", run_dir.name, "--out", str(tmp_path)).stdout
    assert "GPU-hours:" in text and "p10" in text and "sampler cost" in text


def test_idle_gpus_stop_the_run_with_its_save(cli, tmp_path, monkeypatch):
    _env(monkeypatch, tmp_path, "1,4,0,2")
    # Busy until the training's first report, then idle: the stop comes while it trains, so it
    # saves (an idle window from the start would stop it while it still imports: nothing to save).
    monkeypatch.setenv("FAKE_SMI_BUSY_UNTIL", str(tmp_path / "runs" / "*" / "*" / "status" / "progress-*.json"))
    run_dir = _submit(cli, "args=[--updates,2000,--save-interval,1000,--sleep,0.2,--num-envs,8,--steps,16]",
                      "idle_gpus.below=5", "idle_gpus.for=3", "resources.procs_per_node=1")
    st = _done(cli, run_dir.name, timeout=240)
    assert st["state"]["state"] == "STOPPED" and st["state"]["exit_code"] == 143, st
    stopped = json.loads((run_dir / "status" / "stopped.json").read_text())
    assert stopped["reason"] == "idle_gpus" and stopped["saved"] and Path(stopped["saved"]).is_file(), (
        stopped, (run_dir / "logs" / "job.out").read_text()[-3000:])
    assert "idle GPUs: every GPU below 5% for 3s" in st["state"]["reason"]
    idle = json.loads((run_dir / "status" / "idle-stop.json").read_text())
    assert idle["below"] == 5 and idle["for"] == 3 and len(idle["nodes"]) == 1
    failure = json.loads((run_dir / "status" / "failure.json").read_text())
    assert failure["reason"] == "idle_gpus"
    assert "stopped for idle GPUs" in (run_dir / "logs" / "job.out").read_text() or \
        "idle GPUs" in (run_dir / "logs" / "job.out").read_text()
    _no_sampler_left(run_dir, tmp_path)


def test_tasks_launcher_has_one_sampler_per_node(cli, tmp_path, monkeypatch):
    """The tasks launcher (JAX: one process per rank, no per-node launch process): the node's
    first task starts the node's one sampler, which ends with the run."""
    _env(monkeypatch, tmp_path, "30,70")
    args = ["submit", ROOT / "examples/rl/skrl_jax_pendulum.yaml", "--site", "local",
            "--set", "resources.nodes=1", "--set", f"python={sys.executable}",
            "--set", "sample_every=0.3", "--set", "args=[--updates,6,--sleep,0.3,--num-envs,8,--steps,8]"]
    _, run_dir = submitted(cli(*args, cwd=ROOT).stdout)
    st = _done(cli, run_dir.name)
    assert st["state"]["state"] == "COMPLETED", (st, (run_dir / "logs" / "job.out").read_text()[-3000:])
    assert "launch_tasks" in (run_dir / "job.sh").read_text()
    _no_sampler_left(run_dir, tmp_path)
    lines = [json.loads(x) for x in next(run_dir.glob("usage/*.jsonl")).read_text().splitlines()]
    ticks = [x["g"] for x in lines if "g" in x]
    assert ticks and all([r[1] for r in tick] in ([30.0, 70.0], [70.0, 30.0]) for tick in ticks), ticks
    report = json.loads(cli("report", run_dir.name, "--json", "--out", str(tmp_path)).stdout)
    assert {g["index"] for g in report["gpus"]} == {0, 1}
    assert report["attempts"][0]["gpus"] == 2 and report["gpu_hours_allocated"] > 0


def test_cpu_node_report_from_proc(cli, tmp_path, monkeypatch):
    """A node without nvidia-smi: the sampler reads each rank's CPU use and RSS from /proc, and
    the report gives them per rank, with the CPU efficiency and MaxRSS they add up to."""
    path = [d for d in os.environ["PATH"].split(os.pathsep)
            if d and not os.access(os.path.join(d, "nvidia-smi"), os.X_OK)]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    run_dir = _submit(cli, "args=[--updates,30,--sleep,0.1,--num-envs,8,--steps,16]")
    st = _done(cli, run_dir.name)
    assert st["state"]["state"] == "COMPLETED", st
    lines = [json.loads(x) for x in next(run_dir.glob("usage/*.jsonl")).read_text().splitlines()]
    start = next(x for x in lines if x.get("kind") == "start")
    assert isinstance(start["cpus"], int) and start["cpus"] >= 1
    assert not any("g" in x for x in lines)
    rows: dict[int, list] = {}
    for x in lines:
        for rank, cpu, rss in x.get("r", []):
            rows.setdefault(rank, []).append((cpu, rss))
    assert set(rows) == {0, 1} and all(len(v) >= 3 for v in rows.values()), rows
    # A training rank of this example is busy: more than a tenth of a core, tens of MiB.
    assert all(max(c for c, _ in v) > 10 and min(r for _, r in v) > 10_000 for v in rows.values())

    report = json.loads(cli("report", run_dir.name, "--json", "--out", str(tmp_path)).stdout)
    assert report["gpus"] == [] and report["gpu_hours_used"] is None
    for rank, samples in rows.items():
        got = next(r for r in report["ranks"] if r["rank"] == rank)
        assert math.isclose(got["mean_cpu_pct"], sum(c for c, _ in samples) / len(samples))
        assert math.isclose(got["max_rss_mib"], max(r for _, r in samples) / 1024)
    means = [sum(c for c, _ in v) / len(v) for v in rows.values()]
    assert report["cpu_source"] == "samples"
    assert math.isclose(report["cpu_efficiency"], sum(means) / 100 / start["cpus"])
    assert math.isclose(report["max_rss_mib"], max(r for v in rows.values() for _, r in v) / 1024)
    text = cli("report", run_dir.name, "--out", str(tmp_path)).stdout
    assert f"CPU efficiency {100 * report['cpu_efficiency']:.1f}%" in text
    assert f"MaxRSS {report['max_rss_mib']:.0f} MiB (samples)" in text
    assert "rank 0 (" in text and "of a core, RSS peak" in text


def _attempts_from_records(run_dir: Path) -> list[dict]:
    """Each attempt's start, last record and first step, as the sampler wrote them."""
    out: list[dict] = []
    for line in next(run_dir.glob("usage/*.jsonl")).read_text().splitlines():
        x = json.loads(line)
        if x.get("kind") == "start":
            out.append({"start": x["time"], "end": x["time"], "first": None, "job_id": x["job_id"]})
        elif x.get("kind") == "first_step":
            out[-1]["first"] = x["time"]
        t = x.get("t", x.get("time"))
        if x.get("kind") != "start" and t is not None:
            out[-1]["end"] = max(out[-1]["end"], t)
    return out


def test_a_resumed_runs_report_counts_the_time_lost(cli, tmp_path, monkeypatch):
    """A local run stopped with SIGTERM after its first steps and continued with `submit
    --resume`: two attempts in one run directory; the report's time lost between them and
    before each one's first step is what the records say."""
    _env(monkeypatch, tmp_path, "50,60")
    run_dir = _submit(cli, "resources.procs_per_node=1",
                      "args=[--updates,12,--save-interval,1000,--sleep,0.3,--num-envs,8,--steps,16]")
    _wait_for(lambda: any(json.loads(p.read_text()).get("step", 0) >= 2
                          for p in run_dir.glob("status/progress-*.json")), 180, "iteration 2")
    os.kill(int((run_dir / "status" / "pid").read_text()), signal.SIGTERM)
    assert _done(cli, run_dir.name)["state"]["state"] == "STOPPED"
    cli("submit", "--resume", str(run_dir), "--wait", timeout=300)
    assert _done(cli, run_dir.name)["state"]["state"] == "COMPLETED"

    records = _attempts_from_records(run_dir)
    assert len(records) == 2 and records[0]["job_id"] != records[1]["job_id"], records
    assert all(r["first"] is not None for r in records), records
    report = json.loads(cli("report", run_dir.name, "--json", "--out", str(tmp_path)).stdout)
    assert [a["job_id"] for a in report["attempts"]] == [r["job_id"] for r in records]
    gap = records[1]["start"] - records[0]["end"]
    assert gap > 0 and math.isclose(report["lost_between_attempts_s"], gap)
    before = [r["first"] - r["start"] for r in records]
    for attempt, want in zip(report["attempts"], before):
        assert math.isclose(attempt["first_step_s"], want)
        assert math.isclose(attempt["elapsed_s"], records[report["attempts"].index(attempt)]["end"]
                            - records[report["attempts"].index(attempt)]["start"])
    assert math.isclose(report["lost_before_first_step_s"], sum(before))
    assert math.isclose(report["gpu_hours_allocated"],
                        sum(2 * (r["end"] - r["start"]) for r in records) / 3600)
    text = cli("report", run_dir.name, "--out", str(tmp_path)).stdout
    assert text.count("attempt 0 (job ") == 2 and "between attempts" in text


def test_a_sweeps_report_ranks_its_tasks_by_cost_and_metric(cli, tmp_path, monkeypatch):
    """Two tasks of different lengths (each past its first episodes, so each reports a reward):
    the longer costs more GPU-hours; the metric each reached orders them best first; the sweep's
    totals are its tasks' sums."""
    _env(monkeypatch, tmp_path, "40")
    run_dir = _submit(cli, "resources.procs_per_node=1", "sweep.parallel=2",
                      "sweep.variants=[{args: [--updates,6,--sleep,0.2,--num-envs,8,--steps,50]},"
                      " {args: [--updates,14,--sleep,0.2,--num-envs,8,--steps,50]}]")
    st = _done(cli, run_dir.name, timeout=240)
    assert st["state"]["state"] == "COMPLETED", st
    report = json.loads(cli("report", run_dir.name, "--json", "--out", str(tmp_path)).stdout)
    tasks = {t["task"]: t for t in report["tasks"]}
    assert set(tasks) == {0, 1} and all(t["attempts"] for t in tasks.values())
    cost = {i: t["gpu_hours_allocated"] for i, t in tasks.items()}
    assert cost[1] > cost[0] > 0
    assert report["by_cost"] == [1, 0]
    assert math.isclose(report["gpu_hours_allocated"], cost[0] + cost[1])
    values = {i: t["value"] for i, t in tasks.items()}
    assert all(v is not None for v in values.values()) and tasks[0]["metric"], tasks
    assert report["by_metric"] == sorted(values, key=lambda i: (-values[i], i))
    text = cli("report", run_dir.name, "--out", str(tmp_path)).stdout
    assert "by cost (GPU-hours): task 1, task 0" in text and "by metric (best first): task" in text

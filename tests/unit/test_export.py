"""`hpctrain export`'s CLI side without torch: which checkpoint, which folder, what is refused
before any interpreter starts, and the export record read back as untrusted."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from hpctrain.errors import HpctrainError
from hpctrain.follow import export
from hpctrain.runs.records import Run

RUN_ID = "20240101-000000-abcd"


def _run(tmp_path: Path, library="rsl_rl", backend="local", files=(), **job) -> Run:
    d = tmp_path / "runs" / "x" / RUN_ID
    d.mkdir(parents=True)
    rec = dict(run_id=RUN_ID, name="x", site="local", backend=backend, job_id="local-1",
               state="COMPLETED", final=True, script="job.sh", library=library,
               extra={"python": ["/no/such/python"]})
    (d / "run.json").write_text(json.dumps(rec))
    (d / "bootstrap.json").write_text(json.dumps({"checkpoint_patterns": ["checkpoints/model_*.pt"]}))
    (d / "job.yaml").write_text(json.dumps(job))
    for i, name in enumerate(files):
        p = d / "checkpoints" / name
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(b"x")
        os.utime(p, (time.time() - 100 + i, time.time() - 100 + i))
    return Run(d)


def test_checkpoints_by_latest_number_and_path(tmp_path):
    run = _run(tmp_path, files=["model_2.pt", "model_10.pt", "model_5.pt", ".model_11.pt", "model_12.pt.tmp"])
    assert export.pick_checkpoint(run, "latest")[0] == "checkpoints/model_5.pt"  # the newest, as resume
    assert export.pick_checkpoint(run, "10")[0] == "checkpoints/model_10.pt"
    assert export.pick_checkpoint(run, "checkpoints/model_2.pt")[0] == "checkpoints/model_2.pt"
    assert export.pick_checkpoint(run, str(run.path / "checkpoints/model_2.pt"))[0] == "checkpoints/model_2.pt"
    with pytest.raises(HpctrainError, match=r"(?s)no checkpoint numbered 7.*its checkpoints: 2, 5, 10"):
        export.pick_checkpoint(run, "7")
    with pytest.raises(HpctrainError, match="not inside run"):
        export.pick_checkpoint(run, "../../etc/passwd")
    with pytest.raises(HpctrainError, match=r"(?s)no evaluation.*not one.*hpctrain eval .* --checkpoint all"):
        export.pick_checkpoint(run, "best")  # never silently the training reward's


def _evaluated(run: Run, checkpoint: str, mean_return: float, status: str = "ok") -> None:
    from hpctrain.rank.after.evaluate import record_name
    folder = run.path / "eval"
    folder.mkdir(exist_ok=True)
    (folder / record_name(checkpoint)).write_text(json.dumps({
        "format": 1, "checkpoint": checkpoint, "iteration": None, "status": status,
        "mean_return": mean_return, "episode_length": 10.0, "success_rate": None, "episodes": 5,
        "method": "play", "seed": 1, "evaluated": "2026-01-01T00:00:00",
        "eval_run": "20260102-000000-eval", "error": None}))


def test_best_is_the_best_evaluated_checkpoint_and_never_one_outside_the_run(tmp_path):
    run = _run(tmp_path, files=["model_2.pt", "model_5.pt", "model_9.pt"])
    _evaluated(run, "checkpoints/model_2.pt", 3.0)
    _evaluated(run, "checkpoints/model_5.pt", 7.5)
    _evaluated(run, "checkpoints/model_9.pt", 99.0, status="failed")
    rel, rule = export.pick_checkpoint(run, "best")
    assert rel == "checkpoints/model_5.pt" and "by evaluation: mean return 7.5" in rule
    (run.path / "checkpoints" / "model_5.pt").unlink()
    with pytest.raises(HpctrainError, match="no longer a regular file"):
        export.pick_checkpoint(run, "best")
    outside = tmp_path / "runs" / "x" / "model_1.pt"
    outside.write_bytes(b"x")
    _evaluated(run, "../model_1.pt", 1000.0)  # a hostile record naming a file outside the run
    with pytest.raises(HpctrainError, match="no longer a regular file"):
        export.pick_checkpoint(run, "best")


def test_links_are_never_checkpoints(tmp_path):
    run = _run(tmp_path, files=["model_1.pt"])
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model_9.pt").write_bytes(b"secret")
    (run.path / "checkpoints" / "model_8.pt").symlink_to(outside / "model_9.pt")
    os.symlink(outside, run.path / "checkpoints" / "sub")
    assert [rel for rel, _ in export.checkpoints(run)] == ["checkpoints/model_1.pt"]
    with pytest.raises(HpctrainError, match="symbolic link"):
        export.pick_checkpoint(run, "checkpoints/sub/model_9.pt")


@pytest.mark.parametrize("patterns", [["/etc/*"], ["../*.pt"], "checkpoints/*", [1], ["x"] * 17])
def test_patterns_outside_the_run_are_refused(tmp_path, patterns):
    run = _run(tmp_path, files=["model_1.pt"])
    (run.path / "bootstrap.json").write_text(json.dumps({"checkpoint_patterns": patterns}))
    with pytest.raises(HpctrainError, match="checkpoint_patterns"):
        export.pick_checkpoint(run, "latest")


def test_export_names_are_plain():
    assert export.export_name("logs/rl_games/c/h/nn/last_cartpole_ep_4_rew_-inf.pth") == \
        "last_cartpole_ep_4_rew_-inf"
    assert export.export_name("checkpoints/agent_64.pt") == "agent_64"
    assert export.export_name("a/.hidden name$.pt") == "c.hidden_name_"


@pytest.mark.parametrize("library,words", [("skrl_jax", "Flax"), ("command", "own code"),
                                           ("di_engine", "DI-engine")])
def test_libraries_without_an_exporter_are_refused_first(tmp_path, library, words, home):
    run = _run(tmp_path, library=library, files=["model_1.pt"])
    with pytest.raises(HpctrainError, match=words):
        export.export(str(run.path))


def test_a_container_or_cluster_run_is_a_job_not_a_child_of_this_command(tmp_path, home):
    run = _run(tmp_path, files=["model_1.pt"], container={"image": "x.sif"})
    assert export.in_process(_run(tmp_path / "plain", files=["model_1.pt"]))
    assert not export.in_process(run)
    with pytest.raises(HpctrainError, match=r"(?s)job derived from the run.*--wait"):
        export.export(str(run.path))


def test_an_export_jobs_result_is_its_last_marked_line_in_a_bounded_tail(tmp_path):
    run = _run(tmp_path)
    logs = run.path / "logs"
    logs.mkdir()
    assert export.job_result(run) is None  # no output yet
    (logs / "job.out").write_text("booting\n" + export.MARK + '{"error": "from the batch shell"}\n')
    assert export.job_result(run) == {"error": "from the batch shell"}
    (logs / "rank-0.log").write_text(export.MARK + '{"error": "old"}\n' + "x" * export.MAX_OUTPUT
                                     + "\n" + export.MARK + '{"error": "NaN", "fix": "retrain"}\n')
    assert export.job_result(run) == {"error": "NaN", "fix": "retrain"}
    (logs / "rank-0.log").unlink()
    (logs / "rank-0.log").symlink_to(tmp_path / "elsewhere.log")
    (tmp_path / "elsewhere.log").write_text(export.MARK + '{"error": "planted"}\n')
    assert export.job_result(run) == {"error": "from the batch shell"}  # the link is not read


def test_the_command_is_the_runs_interpreter_on_this_rank_side(tmp_path):
    run = _run(tmp_path)
    cmd = export.exporter_command(run, "rsl_rl", "checkpoints/model_1.pt", "model_1", 8)
    assert cmd[0] == "/no/such/python" and cmd[1].endswith("hpctrain/rank")
    assert cmd[2:] == ["export", str(run.path), "rsl_rl", "checkpoints/model_1.pt", "model_1", "8"]


def test_an_export_record_is_checked_against_its_files(tmp_path):
    run = _run(tmp_path)
    folder = run.path / "exports" / "model_1"
    folder.mkdir(parents=True)
    (folder / "policy.onnx").write_bytes(b"o" * 10)
    record = {"files": [{"name": "policy.onnx", "bytes": 10}], "check": {}}
    (folder / "export.json").write_text(json.dumps(record))
    assert export.read_export(run, "model_1")["files"][0]["path"] == str(folder / "policy.onnx")
    for files in ([{"name": "policy.onnx", "bytes": 11}], [{"name": "../run.json", "bytes": 1}], []):
        (folder / "export.json").write_text(json.dumps({"files": files}))
        with pytest.raises(HpctrainError, match="export again"):
            export.read_export(run, "model_1")
    (folder / "export.json").unlink()
    os.mkfifo(folder / "export.json")
    with pytest.raises(HpctrainError, match="not an export record"):
        export.read_export(run, "model_1")


@pytest.mark.parametrize("samples", [0, -3, 5000])
def test_samples_out_of_range_are_refused(tmp_path, samples):
    with pytest.raises(HpctrainError, match="--samples"):
        export.export(str(tmp_path), samples=samples)


def test_the_text_names_each_file_its_size_and_the_check(tmp_path):
    run = _run(tmp_path)
    folder = run.path / "exports" / "model_1"
    folder.mkdir(parents=True)
    (folder / "policy.onnx").write_bytes(b"o" * 25506)
    (folder / "policy.pt").write_bytes(b"p" * 100)
    record = {"checkpoint": "checkpoints/model_1.pt", "policy": "rsl_rl MLPModel 3 -> [64, 64] (elu) -> 1",
              "files": [{"name": "policy.onnx", "bytes": 25506}, {"name": "policy.pt", "bytes": 100}],
              "check": {"samples": 64, "tolerance": 1e-4, "max_diff": {"onnx": 2.3e-07, "torchscript": 0.0}}}
    (folder / "export.json").write_text(json.dumps(record))
    lines = export.text(export.read_export(run, "model_1")).splitlines()
    assert lines[0] == f"exported checkpoints/model_1.pt of run {RUN_ID}: rsl_rl MLPModel 3 -> [64, 64] (elu) -> 1"
    assert lines[1].endswith("policy.onnx  24.9 KiB") and lines[2].endswith("policy.pt    100 B")
    assert "onnx 2.3e-07, torchscript 0 (tolerance 0.0001" in lines[3], lines[3]

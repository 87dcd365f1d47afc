"""`hpctrain eval`: the job derived from a run (job/derived.py), the checkpoints it chooses, each
library's play command, the rendered array (golden + shellcheck), and evaluation records read back
as hostile data (runs/evaluations.py). No process runs here: the real evaluations are in
tests/local/test_eval_local.py and test_isaaclab_local.py."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hpctrain.errors import HpctrainError
from hpctrain.job import derived, evaluate
from hpctrain.job.load import load_job
from hpctrain.libraries import adapter
from hpctrain.rank.after import evaluate as rank_eval
from hpctrain.runs import evaluations
from hpctrain.runs.records import Run
from hpctrain.submission import prepare, write_run
from tests.hostile import tried
from tests.shellcheck import SHELLCHECK

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
PLAIN = {"name": "policy", "library": "command", "script": "/opt/code/train.py",
         "args": ["--iterations", "30"], "seed": 7, "python": "/opt/venv/bin/python",
         "env": {"WANDB_MODE": "offline"},
         "resources": {"nodes": 2, "procs_per_node": 2, "gpus_per_node": 2, "time": "01:00:00"}}


@pytest.fixture
def trained(tmp_path, home, monkeypatch):
    """A run as submit leaves it (written, never started), with checkpoint files made on ask."""
    monkeypatch.setattr("hpctrain.submission.git_state", lambda cwd: {})
    monkeypatch.setattr(derived, "new_run_id", lambda: "20260102-000000-eval")
    monkeypatch.chdir(tmp_path)  # the run's working directory (the golden scripts' "cd")

    def make(job=PLAIN, site="localcluster", files=()) -> Run:
        loaded = load_job(dict(job, runs_dir=str(tmp_path / "runs")), site=site)
        with write_run(prepare(loaded, "20260101-000000-tr01")) as run:
            pass
        for name in files:
            path = run.path / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"weights")
        return run
    return make


def bootstrap(run_dir: Path, task: int | None = None) -> dict:
    return json.loads((run_dir / ("tasks/%d/" % task if task is not None else "")
                       / "bootstrap.json").read_text())


def test_all_is_one_array_of_one_rank_jobs_over_the_run_checkpoints(trained):
    run = trained(files=["checkpoints/model_10.pt", "checkpoints/model_30.pt",
                         "checkpoints/model_20.pt", "checkpoints/.model_40.pt.tmp",
                         "checkpoints/model_50.pt.part"])
    (run.path / "checkpoints" / "model_0.pt").touch()  # empty: never a checkpoint
    ev = evaluate.plan(run, "all", episodes=5)
    assert [c.iteration for c in ev.chosen] == [10, 20, 30], ev.chosen
    assert ev.rule == "every checkpoint" and len(ev.job.tasks) == 3
    for i, task in enumerate(ev.job.tasks):
        spec = task.job.spec
        assert (spec.resources.nodes, spec.resources.procs_per_node) == (1, 1)
        assert spec.resources.gpus_per_node == 1 and spec.sweep is None
        assert spec.preemption.enabled is False and spec.seed == 7
        assert spec.env["WANDB_MODE"] == "offline" and spec.python == "/opt/venv/bin/python"
        assert task.values == {"iteration": (i + 1) * 10, "checkpoint": f"model_{(i + 1) * 10}.pt"}
        program = [spec.script, *spec.args]
        cut = program.index("--")
        assert program[:2] == ["-m", "_hpctrain_rank.after.evaluate"]
        assert program[cut + 1:] == ["/opt/code/train.py", "--iterations", "30"]  # its own command
        assert program[program.index("--checkpoint") + 1] == f"checkpoints/model_{(i + 1) * 10}.pt"
        assert program[program.index("--results") + 1] == "program"
        assert program[program.index("--run") + 1] == str(run.path)
    prep = prepare(ev.job, ev.run_id)
    assert prep.run_dir == run.path.parent.parent / "policy-eval" / "20260102-000000-eval"
    assert len(prep.tasks) == 3 and "#SBATCH --array=0-2" in prep.script
    assert "#SBATCH --nodes=1" in prep.script


def test_every_latest_iteration_and_their_mistakes(trained):
    run = trained(files=[f"checkpoints/model_{i}.pt" for i in range(0, 100, 10)])
    every = evaluate.plan(run, "all", every=4)
    assert [c.iteration for c in every.chosen] == [0, 40, 80, 90]  # and the last
    assert [c.iteration for c in evaluate.plan(run, "40").chosen] == [40]
    os.utime(run.path / "checkpoints" / "model_30.pt", (2e9, 2e9))  # the newest file
    latest = evaluate.plan(run, "latest")
    assert [c.iteration for c in latest.chosen] == [30], "latest is the one a resume takes"
    for args, said in ((("41",), "no checkpoint of iteration 41"),
                       (("newest",), "not latest, best, all or an iteration"),
                       (("latest", 2), "--every K takes every K-th"),
                       (("best",), "has no evaluation yet and no training curve of a main")):
        with pytest.raises(HpctrainError, match=said):
            evaluate.plan(run, *args)
    with pytest.raises(HpctrainError, match="no checkpoint to evaluate"):
        evaluate.plan(trained(dict(PLAIN, name="empty")), "all")


def test_best_is_best_by_evaluation_and_says_so(trained):
    run = trained(files=["checkpoints/model_10.pt", "checkpoints/model_20.pt"])
    for it, mean in ((10, 3.5), (20, 1.0)):
        record(run.path, f"checkpoints/model_{it}.pt", iteration=it, mean_return=mean)
    ev = evaluate.plan(run, "best")
    assert [c.iteration for c in ev.chosen] == [10]
    assert ev.rule.startswith("best by evaluation: the highest mean return, 3.5")


def test_names_that_cannot_reach_a_command_line_are_left_out(trained):
    run = trained(files=["checkpoints/model_1.pt", "checkpoints/model_2 $(reboot).pt",
                         "checkpoints/-model_3.pt"])
    outside = run.path.parent / "elsewhere.pt"
    outside.write_bytes(b"x")
    (run.path / "checkpoints" / "model_9.pt").symlink_to(outside)  # out of the run: not listed
    ev = evaluate.plan(run, "all")
    assert [c.path for c in ev.chosen] == ["checkpoints/model_1.pt"]
    assert len(ev.skipped) == 2 and all("does not pass" in s for s in ev.skipped)
    tried("eval checkpoints", 3)


def test_a_sweep_or_a_study_is_not_one_trained_job(trained):
    sweep = trained(dict(PLAIN, name="sw", sweep={"grid": {"seed": [1, 2]}}))
    with pytest.raises(HpctrainError, match="is a sweep: a job derived from a run is derived from one"):
        evaluate.plan(sweep, "all")


def test_a_run_on_workstations_without_shared_storage_is_refused(trained):
    run = trained(files=["checkpoints/model_1.pt"])
    run.update(extra=dict(run.record.extra, ssh={"hosts": ["ws1"], "sync": "rsync"}))
    with pytest.raises(HpctrainError, match="without a shared file system .sync: rsync."):
        evaluate.plan(run, "latest")


def test_isaaclab3_plays_the_benchmark_bounded_with_the_training_overrides(tmp_path):
    spec = load_job({"name": "c", "library": "rsl_rl", "task": "Isaac-Cartpole",
                     "isaaclab": "/opt/lab", "isaaclab_version": "3.0.0", "seed": 42,
                     "args": ["--num_envs", "64", "agent.save_interval=2",
                              "--external_callback", "probe.install"]}, site="local").spec
    play = adapter("rsl_rl").play(spec, "/r/m.pt", 8, None, 42, "/e/play")
    assert play.command == [
        "-m", "isaaclab", "benchmark", "play", "--rl_library", "rsl_rl", "--task=Isaac-Cartpole",
        "--num_envs=8", "--num_steps=1000", "--seed=42", "--checkpoint=/r/m.pt",
        "--output_path=/e/play", "agent.save_interval=2"]
    assert play.results == "isaaclab-benchmark" and play.in_out and play.seconds is None
    assert play.cpu_args == ("--device", "cpu", "env.sim.device=cpu", "agent.device=cpu")
    # Each library's agent is put on the CPU by its own config key; skrl_jax plays with JAX.
    games = load_job({"name": "g", "library": "rl_games", "task": "Isaac-Cartpole",
                      "isaaclab": "/opt/lab", "isaaclab_version": "3.0.0"}, site="local").spec
    assert adapter("rl_games").play(games, "/r/m.pth", 8, 320, 1, "/e").cpu_args[-2:] == (
        "agent.params.config.device=cpu", "agent.params.config.device_name=cpu")
    jax = load_job({"name": "j", "library": "skrl_jax", "task": "Isaac-Cartpole",
                    "isaaclab": "/opt/lab", "isaaclab_version": "3.0.0"}, site="local").spec
    command = adapter("skrl_jax").play(jax, "/r/a.pickle", 8, 320, 1, "/e").command
    assert command[4:9] == ["--rl_library", "skrl", "--task=Isaac-Cartpole", "--ml_framework", "jax"]


@pytest.mark.parametrize("lib", ["rl_games", "rsl_rl", "skrl"])
def test_isaaclab2_plays_the_library_play_py_bounded_by_time(lib):
    spec = load_job({"name": "c", "library": lib, "task": "Isaac-Cartpole-v0",
                     "isaaclab": "/opt/IsaacLab", "isaaclab_version": "2.3.0",
                     "args": ["agent.params.config.max_epochs=5"]}, site="local").spec
    play = adapter(lib).play(spec, "/r/m.pt", 4, 500, 1, "/e/play")
    assert play.command == [f"/opt/IsaacLab/scripts/reinforcement_learning/{lib}/play.py",
                            "--task=Isaac-Cartpole-v0", "--headless", "--num_envs=4",
                            "--checkpoint=/r/m.pt", "--seed=1", "agent.params.config.max_epochs=5"]
    assert play.results == "none" and play.seconds == 300.0


def test_own_programs_of_every_library_get_the_plain_contract():
    for lib in ("command", "rl_games", "rsl_rl", "skrl", "skrl_jax", "di_engine"):
        spec = load_job({"name": "c", "library": lib, "script": "train.py", "args": ["--x", "1"],
                         "config": "cfg.py" if lib == "di_engine" else None}, site="local").spec
        play = adapter(lib).play(spec, "/r/m.pt", 4, None, 1, "/e")
        assert play.results == "program", lib
        assert play.command[-2:] == ["--x", "1"], (lib, play.command)


def test_the_eval_array_matches_golden_and_passes_shellcheck(trained, update_golden):
    run = trained(files=["checkpoints/model_10.pt", "checkpoints/model_20.pt"])
    ev = evaluate.plan(run, "all", episodes=4, steps=200)
    prep = prepare(ev.job, ev.run_id)
    root = str(run.path.parent.parent.parent)
    texts = {"eval-cluster-array": prep.script.replace(root, "/work"),
             "eval-cluster-array-task": prep.tasks[1].script.replace(root, "/work")}
    for case, text in texts.items():
        path = GOLDEN / f"{case}.sh"
        if update_golden:
            path.write_text(text)
        assert text == path.read_text(), f"{path} differs: run pytest --update-golden and review"
    import subprocess
    said = subprocess.run([SHELLCHECK, "--severity=style", "--shell=bash",
                           *(str(GOLDEN / f"{c}.sh") for c in texts)],
                          capture_output=True, text=True)
    assert said.returncode == 0, said.stdout


# ----------------------------------------------------------------------------- records

def record(run_dir: Path, checkpoint: str, **values) -> Path:
    data = {"format": 1, "checkpoint": checkpoint, "iteration": None, "status": "ok",
            "mean_return": 1.0, "episode_length": 10.0, "success_rate": None, "episodes": 5,
            "method": "the program's own command", "seed": 1, "evaluated": "2026-01-01T00:00:00",
            "eval_run": "20260102-000000-eval", "error": None}
    data.update(values)
    path = run_dir / "eval" / rank_eval.record_name(checkpoint)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_hostile_records_are_named_and_never_hide_the_good_ones(tmp_path):
    good = record(tmp_path, "checkpoints/model_1.pt", iteration=1, mean_return=2.0)
    outside = tmp_path / "outside.json"
    outside.write_text(good.read_text())
    (tmp_path / "eval" / "checkpoints_model_2.pt.json").symlink_to(outside)
    os.mkfifo(tmp_path / "eval" / "checkpoints_model_3.pt.json")
    (tmp_path / "eval" / "checkpoints_model_4.pt.json").write_bytes(b"{" * 70_000)
    record(tmp_path, "checkpoints/model_5.pt", mean_return=float("nan"))
    record(tmp_path, "checkpoints/model_6.pt", success_rate=7)
    record(tmp_path, "checkpoints/model_7.pt", error="\x1b]0;owned\x07")
    bad = record(tmp_path, "checkpoints/model_8.pt")
    bad.rename(tmp_path / "eval" / "checkpoints_model_9.pt.json")  # a record of another file
    (tmp_path / "eval" / "checkpoints_model_10.pt.json").write_text('[1, 2]')
    record(tmp_path, "checkpoints/model_11.pt", iteration=True)
    (tmp_path / "eval" / "checkpoints_model_12.pt.json").write_bytes(b"\xff\xfe")
    found, problems = evaluations.read(tmp_path)
    assert [e.checkpoint for e in found] == ["checkpoints/model_1.pt"]
    assert len(problems) == 10, problems
    said = "\n".join(problems)
    for part in ("not a regular file", "larger than", "'mean_return'", "'success_rate'",
                 "'error'", "is not this file's", "not a JSON object", "'iteration'"):
        assert part in said, (part, said)
    assert evaluations.best(found).checkpoint == "checkpoints/model_1.pt"
    tried("eval records", 10)


def test_an_eval_folder_that_is_a_link_is_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    record(elsewhere, "checkpoints/model_1.pt")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "eval").symlink_to(elsewhere / "eval")
    assert evaluations.read(run_dir) == ([], [f"{run_dir / 'eval'}: not a directory"])
    tried("eval records")


def test_the_node_side_reads_what_the_play_wrote(tmp_path):
    (tmp_path / "result.json").write_text(json.dumps(
        {"mean_return": -1.5, "episode_length": 20, "success_rate": 0.5, "episodes": 5}))
    assert rank_eval.from_program(str(tmp_path)) == {
        "mean_return": -1.5, "episode_length": 20.0, "success_rate": 0.5, "episodes": 5}
    (tmp_path / "result.json").write_text(json.dumps({"mean_return": "high"}))
    with pytest.raises(ValueError, match="no finite 'mean_return'"):
        rank_eval.from_program(str(tmp_path))
    bundle = tmp_path / "bench"
    bundle.mkdir()
    with pytest.raises(ValueError, match="wrote no result"):
        rank_eval.from_isaaclab_benchmark(str(bundle))
    (bundle / "benchmark_play_x.json").write_text(json.dumps(
        {"reward": {"mean": 4.2, "std": 1.0}, "ep_length": {"mean": 250.0}, "success_rate": None}))
    assert rank_eval.from_isaaclab_benchmark(str(bundle)) == {
        "mean_return": 4.2, "episode_length": 250.0, "success_rate": None, "episodes": None}
    (bundle / "benchmark_play_x.json").write_text(json.dumps({"reward": None}))
    with pytest.raises(ValueError, match="no episode completed"):
        rank_eval.from_isaaclab_benchmark(str(bundle))
    assert rank_eval.record_name("../x/.model 1.pt") == "_x_.model_1.pt.json"


def test_a_damaged_or_hostile_job_yaml_is_refused_naming_it(trained):
    run = trained(dict(PLAIN, args=["--name", "$(touch /tmp/owned); `id`"]),
                  files=["checkpoints/model_1.pt"])
    ev = evaluate.plan(run, "latest")
    prep = prepare(ev.job, ev.run_id)
    program = prep.plan.bootstrap["program"]
    assert program[-2:] == ["--name", "$(touch /tmp/owned); `id`"]  # byte-exact, never shell
    assert "$(touch /tmp/owned)" not in prep.script.replace("'$(touch /tmp/owned)", "")
    job_yaml = run.path / "job.yaml"
    for text, said in (("name: x\nlibrary: nope\n", "no longer loads"),
                       ("name: [unclosed\n", "cannot read"),
                       ('name: x\nscript: t.py\nsetup: ["ok\\nrm -rf ~"]\n', "no longer loads")):
        job_yaml.write_text(text)
        with pytest.raises(HpctrainError, match=said) as caught:
            evaluate.plan(run, "latest")
        assert str(job_yaml) in str(caught.value), caught.value
    job_yaml.unlink()
    os.mkfifo(job_yaml)  # a pipe must not hang the command
    with pytest.raises(HpctrainError, match="cannot read .*job.yaml"):
        evaluate.plan(run, "latest")
    tried("eval job.yaml", 5)


def test_a_containered_isaaclab_run_is_evaluated_in_its_container_with_its_caches(
        trained, tmp_path):
    """The derived job runs `command` (the evaluation's wrapper), which alone would not bind
    Isaac Sim's caches: the run's do."""
    (tmp_path / "containers.yaml").write_text(
        "name: containers\nscheduler: slurm\ncontainers: {runtimes: [apptainer], "
        "cache_dir: /scratch/isaac-sim}\n")
    job = {"name": "boxed", "library": "rsl_rl", "task": "Isaac-Cartpole",
           "isaaclab": "/workspace/isaaclab", "isaaclab_version": "3.0.0", "python": "python3",
           "resources": {"nodes": 2, "gpus_per_node": 4},
           "container": {"runtime": "apptainer", "image": "/images/lab.sif"}}
    run = trained(job, site=str(tmp_path / "containers.yaml"),
                  files=["logs/rsl_rl/cartpole/hpctrain/model_5.pt"])
    spec = evaluate.plan(run, "latest").job.spec
    assert spec.container.image == "/images/lab.sif" and spec.container.isaac_sim_caches is True
    assert spec.python == "python3" and spec.resources.gpus_per_node == 1
    assert spec.script == "-m" and "--rl_library" in spec.args


def test_time_is_the_runs_unless_given_and_checked_as_a_job_file_would_be(trained):
    run = trained(files=["checkpoints/model_1.pt"])
    assert evaluate.plan(run).job.spec.resources.time == "01:00:00"
    assert evaluate.plan(run, time="00:20:00").job.spec.resources.time == "00:20:00"
    with pytest.raises(HpctrainError, match="--time: .soon. is not a time limit"):
        evaluate.plan(run, time="soon")


def test_the_python_handle_reads_the_records(trained):
    from hpctrain.follow.handle import Handle
    run = trained(files=["checkpoints/model_1.pt"])
    record(run.path, "checkpoints/model_1.pt", iteration=1, mean_return=0.5)
    assert [e["mean_return"] for e in Handle(run).evaluations()] == [0.5]
    (run.path / "eval" / "checkpoints_model_2.pt.json").write_text("[]")
    with pytest.raises(HpctrainError, match="1 evaluation record.s. cannot be read"):
        Handle(run).evaluations()

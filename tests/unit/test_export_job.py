"""`hpctrain export` of a run off this machine or in a container: the 1-node, 1-task job derived
from the run (job/export.py), its program the exporter, rendered (golden + shellcheck). The real
export job runs in tests/e2e/test_isaaclab_cluster.py (Slurm, Isaac Lab 3.0 in its container)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hpctrain.errors import HpctrainError
from hpctrain.follow import export
from hpctrain.job import derived
from hpctrain.job import export as export_job
from hpctrain.job.load import load_job
from hpctrain.runs.records import Run
from hpctrain.submission import prepare, write_run
from tests.shellcheck import SHELLCHECK

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
BOXED = {"name": "boxed", "library": "rsl_rl", "task": "Isaac-Cartpole",
         "isaaclab": "/workspace/isaaclab", "isaaclab_version": "3.0.0", "python": "python3",
         "env": {"WANDB_MODE": "offline"},
         "resources": {"nodes": 2, "gpus_per_node": 4, "time": "04:00:00"},
         "container": {"runtime": "apptainer", "image": "/images/lab.sif"}}
CKPT = "logs/rsl_rl/cartpole/hpctrain/model_5.pt"


@pytest.fixture
def trained(tmp_path, home, monkeypatch):
    monkeypatch.setattr("hpctrain.submission.git_state", lambda cwd: {})
    monkeypatch.setattr(derived, "new_run_id", lambda: "20260102-000000-expo")
    monkeypatch.chdir(tmp_path)  # the run's working directory (the golden script's "cd")
    site = tmp_path / "containers.yaml"
    site.write_text("name: containers\nscheduler: slurm\ncontainers: {runtimes: [apptainer], "
                    "cache_dir: /scratch/isaac-sim}\n")

    def make(job=BOXED, site=str(site), files=(CKPT,)) -> Run:
        loaded = load_job(dict(job, runs_dir=str(tmp_path / "runs")), site=site)
        with write_run(prepare(loaded, "20260101-000000-tr01")) as run:
            pass
        for name in files:
            (run.path / name).parent.mkdir(parents=True, exist_ok=True)
            (run.path / name).write_bytes(b"weights")
        return run
    return make


def _chosen(run: Run, samples=None) -> export.Chosen:
    return export.Chosen(run, "rsl_rl", CKPT, export.export_name(CKPT), samples, "the newest")


def test_the_export_job_is_one_rank_of_the_run_in_its_container_running_the_exporter(trained):
    run = trained()
    assert not export.in_process(run)  # a Slurm run: not a child of this command
    ex = export_job.plan(_chosen(run, 16))
    spec = ex.job.spec
    assert (spec.resources.nodes, spec.resources.procs_per_node) == (1, 1)
    assert spec.resources.gpus_per_node == 1 and spec.resources.time == "00:30:00"
    assert spec.preemption.enabled is False and spec.sweep is None
    assert spec.container.image == "/images/lab.sif" and spec.container.isaac_sim_caches is True
    assert f"{run.path}:{run.path}" in spec.container.mounts  # it writes run/exports/
    assert spec.python == "python3" and spec.env["WANDB_MODE"] == "offline"
    assert [spec.script, *spec.args] == ["-m", "_hpctrain_rank.after.export", str(run.path),
                                         "rsl_rl", CKPT, "model_5", "16"]
    # The same arguments as the in-process exporter's command line, after its interpreter and rank.
    assert export.exporter_command(run, "rsl_rl", CKPT, "model_5", 16)[-5:] == spec.args[1:]
    prep = prepare(ex.job, ex.run_id)
    assert prep.run_dir == run.path.parent.parent / "boxed-export" / "20260102-000000-expo"
    assert export_job.plan(_chosen(run), "00:05:00").job.spec.resources.time == "00:05:00"
    short = trained(dict(BOXED, name="short", resources={"nodes": 2, "time": "00:04:00"}))
    assert export_job.plan(_chosen(short)).job.spec.resources.time == "00:04:00"  # the run's, shorter
    with pytest.raises(HpctrainError, match="--time"):
        export_job.plan(_chosen(run), "soon")


def test_a_run_whose_hosts_keep_their_own_copies_is_refused(trained):
    run = trained()
    run.update(extra=dict(run.record.extra, ssh={"hosts": ["ws1"], "sync": "rsync"}))
    with pytest.raises(HpctrainError, match="without a shared file system .sync: rsync."):
        export_job.plan(_chosen(run))


def test_the_export_job_matches_golden_and_passes_shellcheck(trained, update_golden):
    run = trained()
    ex = export_job.plan(_chosen(run))
    prep = prepare(ex.job, ex.run_id)
    text = prep.script.replace(str(run.path.parent.parent.parent), "/work")
    path = GOLDEN / "export-isaac-rsl_rl-container.sh"
    if update_golden:
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs: run pytest --update-golden and review"
    said = subprocess.run([SHELLCHECK, "--severity=style", "--shell=bash", str(path)],
                          capture_output=True, text=True)
    assert said.returncode == 0, said.stdout


def test_the_cli_prints_the_export_job_on_dry_run_and_refuses_it_for_a_local_run(trained, capsys):
    from hpctrain.cli import main
    run = trained()
    assert main(["export", str(run.path), "--dry-run", "--checkpoint", "5"]) == 0
    out = capsys.readouterr().out
    assert f"exporting {CKPT} of run {run.id} (the checkpoint numbered 5) in a job on containers" in out
    assert "#SBATCH --nodes=1" in out and "-m _hpctrain_rank.after.export" in out
    assert not (run.path.parent.parent / "boxed-export").exists()  # nothing submitted
    local = trained({"name": "here", "library": "rsl_rl", "script": "train.py",
                     "python": "python3"}, site="local", files=["checkpoints/model_1.pt"])
    assert main(["export", str(local.path), "--dry-run"]) == 2
    assert "runs here, as a child of this command" in capsys.readouterr().err

"""Sweeps: expansion order, keys that may not vary, site limits, the array script."""
import pytest

from hpctrain.submission import prepare
from hpctrain.errors import HpctrainError
from hpctrain.job.load import load_job

BASE = {"name": "sw", "library": "command", "script": "train.py",
        "resources": {"nodes": 1, "time": "00:05:00"}}


def job(sweep, site="localcluster", **extra):
    return load_job(dict(BASE, sweep=sweep, **extra), site=site)


def test_grid_times_variants_times_seeds(home):
    prep = prepare(job({"grid": {"env.LR": [0.1, 0.01], "args": [["--a"], ["--b"]]},
                        "variants": [{"env.ALGO": "ppo"}], "seeds": [1, 2], "parallel": 3}))
    assert len(prep.tasks) == 8 and prep.parallel == 3
    values = [t.values for t in prep.job.tasks]
    assert values[0] == {"env.LR": 0.1, "args": ["--a"], "env.ALGO": "ppo", "seed": 1}
    assert values[-1] == {"env.LR": 0.01, "args": ["--b"], "env.ALGO": "ppo", "seed": 2}
    t7 = prep.tasks[7]
    assert t7.plan.env["LR"] == "0.01" and t7.plan.env["ALGO"] == "ppo"
    assert t7.plan.bootstrap["seed"] == 2 and t7.plan.program[-1] == "--b"
    assert str(t7.run_dir) == f"{prep.run_dir}/tasks/7" and t7.plan.run_dir == str(t7.run_dir)
    assert "#SBATCH --array=0-7%3" in prep.script
    assert f"#SBATCH --output={prep.run_dir}/logs/slurm-%A_%a.out" in prep.script
    assert 'exec bash "$TASK_DIR/job.sbatch"' in prep.script


def test_parallel_defaults_to_site(home):
    prep = prepare(job({"seeds": [1, 2, 3, 4, 5]}))
    assert "#SBATCH --array=0-4%2" in prep.script  # localcluster: array_parallelism 2


@pytest.mark.parametrize("key", ["resources.nodes", "resources.time", "name", "site"])
def test_allocation_keys_cannot_vary(home, key):
    with pytest.raises(HpctrainError) as err:
        prepare(job({"grid": {key: ["1", "2"]}}))
    assert "same for every task" in err.value.what and err.value.fix


def test_array_size_limit(home, tmp_path, monkeypatch):
    site = tmp_path / "small.yaml"
    site.write_text("name: small\nscheduler: slurm\nlimits: {max_array_size: 3}\n")
    with pytest.raises(HpctrainError) as err:
        prepare(job({"seeds": [1, 2, 3, 4]}, site=str(site)))
    assert "at most 3" in err.value.what


def test_bad_value_names_the_task(home):
    with pytest.raises(HpctrainError) as err:
        prepare(job({"grid": {"cpu_mode": ["on", "sometimes"]}}))
    assert "sweep task 1" in err.value.what and "cpu_mode" in err.value.what


def test_local_sweep_runs_k_at_a_time(home):
    prep = prepare(job({"seeds": [1, 2, 3]}, site="local"))
    assert "K=2" not in prep.script and "N=3" in prep.script  # local has no array_parallelism
    prep = prepare(job({"seeds": [1, 2, 3], "parallel": 2}, site="local"))
    assert "K=2" in prep.script and "wait -n" in prep.script


def test_a_local_sweep_is_bounded_by_this_machines_cpus(home, monkeypatch):
    """A sweep's tasks on the local site are processes of this machine: by default as many run
    at once as its CPUs take (job/machine.py: 4 ranks per CPU), and a `parallel` that would
    start more is refused with the bound and the fix; above the number of tasks it is harmless."""
    import hpctrain.job.machine as machine
    monkeypatch.setattr(machine, "local_cpus", lambda: 2)
    prep = prepare(job({"seeds": list(range(20))}, site="local"))
    assert prep.parallel == 8 and "K=8" in prep.script
    prep = prepare(job({"seeds": list(range(20))}, site="local",
                       resources={"nodes": 1, "procs_per_node": 3}))
    assert prep.parallel == 2  # 3 ranks a task: 8 // 3
    with pytest.raises(HpctrainError) as err:
        job({"seeds": list(range(20)), "parallel": 1000000}, site="local")
    assert "sweep.parallel is 1000000" in err.value.what, err.value
    assert "this machine gives hpctrain 2 CPU(s): at most 8 at once" in err.value.what
    assert "sweep.parallel: 8 or fewer" in err.value.fix and "--site" in err.value.fix
    assert job({"seeds": [1, 2, 3], "parallel": 1000000}, site="local").spec.sweep.parallel == 1000000
    assert prepare(job({"seeds": list(range(20)), "parallel": 1000000})).parallel == 20  # Slurm: the array's

"""Per-job scheduler options (`sbatch:`), resources per library, and chains (`after:`): what
reaches the directive table, and every refusal with the key to use instead."""
from __future__ import annotations

import pytest

from hpctrain.backends.slurm.backend import SlurmBackend
from hpctrain.errors import HpctrainError
from hpctrain.job.load import load_job
from hpctrain.job.plan import make_plan
from hpctrain.submission import prepare
from tests.operate_helpers import recorded_run

BASE = {"name": "opts", "script": "train.py", "python": "python"}


def job(extra=None, site="localcluster", **kw):
    data = dict(BASE, runs_dir="/runs", **(extra or {}))
    return load_job(data, site=site, **kw)


def table(j) -> list[tuple[str, str | None]]:
    return make_plan(j, "/runs/x").directives


# ----------------------------------------------------------------------------- sbatch options

def test_options_follow_the_site_extras_and_win_over_them(home, tmp_path):
    site = tmp_path / "s.yaml"
    site.write_text("name: s\nscheduler: slurm\nsbatch_extra: ['--reservation=site', --hold]\n")
    j = job({"sbatch": {"reservation": "mine", "mail_type": ["END", "FAIL"],
                        "exclude": "node[3-4]", "comment": "a b #2", "begin": 5,
                        "overcommit": True, "nice": None, "contiguous": False}}, site=str(site))
    d = table(j)
    keys = [k for k, _ in d]
    tail = d[keys.index("hold"):]  # the site's extras, then the job's options in its order
    assert tail == [("hold", None), ("reservation", "mine"), ("mail-type", "END,FAIL"),
                    ("exclude", "node[3-4]"), ("comment", "a b #2"), ("begin", "5"),
                    ("overcommit", None)]
    assert keys.count("reservation") == 1  # the job's replaced the site's
    header = SlurmBackend().header(d)
    assert '#SBATCH --comment="a b #2"' in header and "#SBATCH --overcommit" in header
    assert "#SBATCH --mail-type=END,FAIL" in header


@pytest.mark.parametrize("key,expected", [
    ("nodes", "use resources.nodes"), ("ntasks-per-node", "resources.procs_per_node"),
    ("cpus_per_task", "resources.cpus_per_proc"), ("gpus-per-task", "resources.gpus_per_node"),
    ("gres", "resources.gpus_per_node"), ("mem", "resources.mem"),
    ("mem-per-cpu", "resources.mem_per_cpu"), ("time", "resources.time"),
    ("output", "run directory"), ("signal", "preemption.signal"),
    ("requeue", "preemption.requeue"), ("dependency", "after"), ("array", "sweep"),
    ("job-name", "use name"), ("export", "env"), ("--partition", "resources.partition"),
])
def test_options_hpctrain_owns_are_refused_with_the_key_to_use(key, expected, home):
    with pytest.raises(HpctrainError) as err:
        job({"sbatch": {key: "1"}})
    text = str(err.value)
    assert "hpctrain sets --" in text and expected in text, text
    assert "<python>" in text  # where it came from


def test_short_options_bad_names_and_bad_values(home):
    with pytest.raises(HpctrainError, match="give its long name: exclude"):
        job({"sbatch": {"x": "node1"}})
    with pytest.raises(HpctrainError, match="not a scheduler option name"):
        job({"sbatch": {"mail type": "END"}})
    for bad in ('a"b', "a\\b", "", " ", "é", "x" * 2000):
        with pytest.raises(HpctrainError, match="cannot carry"):
            job({"sbatch": {"comment": bad}})
    with pytest.raises(HpctrainError, match="empty list"):
        job({"sbatch": {"mail-type": []}})
    with pytest.raises(HpctrainError, match="names --mail-type twice"):
        job({"sbatch": {"mail-type": "END", "mail_type": "FAIL"}})
    with pytest.raises(HpctrainError, match="control character"):
        job({"sbatch": {"comment": "a\n#SBATCH --nodes=9"}})


def test_unknown_option_is_passed_with_a_warning(home):
    j = job({"sbatch": {"mail-typ": "END", "brand-new-option": "1"}})
    assert any("--mail-typ is not one hpctrain knows (did you mean --mail-type?)" in w
               for w in j.warnings), j.warnings
    assert ("mail-typ", "END") in table(j) and ("brand-new-option", "1") in table(j)


def test_site_forbids_and_skips_options(home, tmp_path):
    site = tmp_path / "s.yaml"
    site.write_text("name: s\nscheduler: slurm\nsbatch_forbid: [mail-user]\nsbatch_skip: [licenses]\n")
    with pytest.raises(HpctrainError, match="site 's' does not allow jobs to set --mail-user"):
        job({"sbatch": {"mail_user": "me@x"}}, site=str(site))
    with pytest.raises(HpctrainError, match="rejects --licenses"):
        job({"sbatch": {"licenses": "fs:1"}}, site=str(site))
    site.write_text("name: s\nscheduler: slurm\nsbatch_forbid: ['a b']\n")
    with pytest.raises(HpctrainError, match="not an option name"):
        job({}, site=str(site))


def test_no_scheduler_no_options(home):
    j = job({"sbatch": {"mail-type": "END"}}, site="local")
    assert any("has no scheduler" in w for w in j.warnings)


def test_submitit_takes_the_options_from_the_table(home):
    from hpctrain.backends.submitit import slurm_parameters
    j = job({"sbatch": {"mail-type": ["END"], "comment": "a b", "hold": True}})
    params = slurm_parameters(make_plan(j, "/runs/x"))
    extra = params["additional_parameters"]
    assert extra["mail-type"] == "END" and extra["comment"] == "a b" and extra["hold"] is True


# ----------------------------------------------------------------------------- resources

ISAAC = {"library": "rsl_rl", "script": None, "task": "Isaac-Cartpole-v0", "isaaclab": "/opt/IsaacLab",
         "isaaclab_version": "2.3.2",
         "resources": {"nodes": 1, "gpus_per_node": 4}}


def test_isaaclab_ranks_get_isaaclabs_cpus_and_memory(home):
    j = job(ISAAC, site="slurm-generic")
    d = dict(table(j))
    assert j.spec.resources.cpus_per_proc == 8 and d["cpus-per-task"] == "32"
    assert d["mem-per-cpu"] == "4048M" and not j.warnings
    # Without a GPU (a CPU check of the launch) or with an own script: 1 CPU, the site's memory.
    cpu = job(dict(ISAAC, resources={"gpus_per_node": 0}), site="slurm-generic")
    assert cpu.spec.resources.cpus_per_proc == 1 and "mem-per-cpu" not in dict(table(cpu))
    own = job(dict(ISAAC, script="mine.py"), site="slurm-generic")
    assert own.spec.resources.cpus_per_proc == 1


def test_asking_for_less_than_isaaclab_warns_with_numbers(home):
    j = job(dict(ISAAC, resources={"gpus_per_node": 4, "cpus_per_proc": 2, "mem": "16G"}),
            site="slurm-generic")
    text = "\n".join(j.warnings)
    assert "ranks get 2 CPU(s) each" in text and "gives a rank 8" in text
    assert "cpus_per_proc: 8" in text
    assert "mem=16G per node gives each of 4 rank(s) 4096 MB" in text
    assert "2 x 4048 MB = 8096 MB" in text and "mem: 32G" in text
    j = job(dict(ISAAC, resources={"gpus_per_node": 4, "mem_per_cpu": "1G"}), site="slurm-generic")
    assert any("mem_per_cpu=1G is less than the 4048M" in w for w in j.warnings)


def test_isaaclab_defaults_stay_within_the_site(home, tmp_path):
    site = tmp_path / "small.yaml"
    site.write_text("name: small\nscheduler: slurm\nlimits: {cpus_per_node: 16, mem_per_node: 32G}\n")
    j = job(ISAAC, site=str(site))
    assert j.spec.resources.cpus_per_proc == 4 and j.spec.resources.mem_per_cpu == "2048M"
    text = "\n".join(j.warnings)
    assert "each rank gets 4 CPU(s)" in text and "each CPU gets 2048M" in text
    with pytest.raises(HpctrainError, match="nodes have 32G"):
        job(dict(ISAAC, resources={"gpus_per_node": 4, "mem": "64G"}), site=str(site))


def test_mem_and_mem_per_cpu_are_one_choice(home):
    with pytest.raises(HpctrainError, match="Slurm takes one") as err:
        job({"resources": {"mem_per_cpu": "2G"}})  # localcluster's defaults give mem: 1000M
    assert "mem: null" in str(err.value)
    j = job({"resources": {"mem": None, "mem_per_cpu": "2G"}})
    assert ("mem-per-cpu", "2G") in table(j) and "mem" not in dict(table(j))


# ----------------------------------------------------------------------------- after

@pytest.fixture
def runs(home, tmp_path):
    d = tmp_path / "recorded"
    recorded_run(d, "41", run_id="20260101-000000-aaaa")
    recorded_run(d, "42", run_id="20260101-000000-bbbb", state="FAILED", final=True)
    recorded_run(d, "43", run_id="20260101-000000-cccc", state="COMPLETED", final=True)
    recorded_run(d, "local-7", run_id="20260101-000000-dddd", backend="local")
    return d


def test_after_becomes_one_dependency(runs):
    j = job({"after": ["aaaa", "afterany:42", "afternotok:20260101-000000-bbbb", "43"]})
    d = dict(table(j))
    assert d["dependency"] == "afterok:41:43,afterany:42,afternotok:42"
    assert d["kill-on-invalid-dep"] == "yes"
    keep = job({"after": "aaaa", "sbatch": {"kill-on-invalid-dep": "no"}})
    assert [v for k, v in table(keep) if k == "kill-on-invalid-dep"] == ["no"]


def test_after_refusals(runs):
    cases = [
        ({"after": "nosuchrun"}, "no run 'nosuchrun' found"),
        ({"after": "afterwards:aaaa"}, "'afterwards' is not one of afterok, afterany, afternotok"),
        ({"after": "afterok:"}, "it names no run"),
        ({"after": "bbbb"}, "already ended FAILED: afterok can never be satisfied"),
        ({"after": "afternotok:cccc"}, "already ended COMPLETED: afternotok can never"),
        ({"after": "dddd"}, "ran on 'local'"),
    ]
    for extra, expected in cases:
        with pytest.raises(HpctrainError, match=expected):
            job(extra)
    with pytest.raises(HpctrainError, match="cannot wait for another run"):
        job({"after": "aaaa"}, site="local")


def test_cli_after_replaces_the_jobs_and_is_named_in_errors(runs):
    j = job({"after": "bbbb"}, after=["aaaa"])
    assert [d["job_id"] for d in j.after] == ["41"]
    with pytest.raises(HpctrainError) as err:
        job({}, after=["nosuch"])
    assert str(err.value).startswith("--after nosuch: 'after' names 'nosuch'")


def test_a_sweep_waits_as_one_array(runs):
    prep = prepare(job({"after": "aaaa", "sweep": {"seeds": [1, 2]}}), "RUN_ID")
    assert "#SBATCH --dependency=afterok:41" in prep.script
    assert all("dependency" not in t.script for t in prep.tasks)  # a task resubmitted alone


def test_waits_for_verdicts():
    from types import SimpleNamespace as NS

    from hpctrain.backends.base import JobState, State
    from hpctrain.follow.status import waits_for
    after = [{"mode": "afterok", "run_id": "a", "job_id": "1", "path": "/a"},
             {"mode": "afterok", "run_id": "b", "job_id": "2", "path": "/b"},
             {"mode": "afterany", "run_id": "b", "job_id": "2", "path": "/b"},
             {"mode": "afternotok", "run_id": "c", "job_id": "3", "path": "/c"}]
    found = {"/a": NS(state=JobState(State.RUNNING)), "/b": NS(state=JobState(State.FAILED)),
             "/c": NS(state=JobState(State.COMPLETED))}
    assert [w["verdict"] for w in waits_for(after, found)] == ["waiting", "never", "met", "never"]


def test_status_shows_what_a_run_waits_for(runs):
    from hpctrain.backends.base import JobState, State
    from hpctrain.follow.display import format_status
    from hpctrain.follow.status import RunStatus
    st = RunStatus(run_id="r", name="eval", site="localcluster", backend="slurm", job="44",
                   path="/p", submitted=None, nodes=1, ranks_per_node=1,
                   state=JobState(State.PENDING, reason="Dependency",
                                  dependency="afterok:41(unfulfilled)"),
                   waits_for=[{"mode": "afterok", "run_id": "20260101-000000-aaaa", "job": "41",
                               "state": "RUNNING", "verdict": "waiting"}])
    text = format_status(st)
    assert "state     PENDING (Dependency)" in text
    assert "after     afterok run 20260101-000000-aaaa (job 41): RUNNING" in text

"""Studies (search:): every mistake of a space one error at its line, the study's scripts, and
the worker's decisions (spaces, journal, what counts, when to stop) — no process started."""
import os
import textwrap

import pytest

from hpctrain.errors import HpctrainError
from hpctrain.job.load import load_job
from hpctrain.job.search import apply, max_failures, trial_spec
from hpctrain.submission import prepare

JOB = """\
name: st
script: train.py
args: ["--steps", 5, "agent.params.config.learning_rate=3e-4"]
resources: {{nodes: 2, time: "00:10:00"}}
{extra}search:
  params:
{params}
  n_trials: 6
  parallel: 2
"""


def load(tmp_path, params: str, extra: str = "", site: str = "localcluster"):
    path = tmp_path / "job.yaml"
    path.write_text(JOB.format(params=textwrap.indent(params, "    "), extra=extra))
    return load_job(str(path), site=site)


@pytest.mark.parametrize("params, line, what", [
    ("env.LR: {low: 0, high: 0.1, log: true}", 7, "log scale, so its bounds must be > 0"),
    ("env.LR: {low: 0.1, high: 0.01}", 7, "low 0.1 >= high 0.01"),
    ("env.OPT: {choices: []}", 7, "no choices"),
    ("args.9: {low: 1, high: 4}", 7, "'9' is not an index"),
    ("foo.bar: {low: 1, high: 4}", 7, "no key 'foo.bar' and no argument foo.bar=..."),
    ("env.LR: {low: 1e-4, high: 1e-2}\nresources.nodes: {low: 1, high: 4}", 8,
     "must be the same for every trial"),
    ("env.N: {type: int, low: 1.5, high: 4}", 7, "whole numbers"),
    ("env.OPT: {choices: [a], low: 1}", 7, "categorical"),
])
def test_every_space_mistake_is_one_error_at_its_line(home, tmp_path, params, line, what):
    with pytest.raises(HpctrainError) as err:
        load(tmp_path, params)
    assert what in err.value.what
    assert f"job.yaml:{line}" in str(err.value.where)


def test_a_key_also_in_the_sweep(home, tmp_path):
    with pytest.raises(HpctrainError) as err:
        load(tmp_path, "env.LR: {low: 1e-4, high: 1e-2, log: true}",
             extra="sweep:\n  grid:\n    env.LR: [0.1, 0.2]\n")
    assert "also varied by sweep" in err.value.what and "job.yaml:" in str(err.value.where)


def test_a_value_the_job_cannot_take_is_refused_at_load(home, tmp_path):
    # seed is an int: a float space's bound fails the schema, named by the parameter.
    with pytest.raises(HpctrainError) as err:
        load(tmp_path, "seed: {type: float, low: 0.5, high: 2.5}")
    assert "search.params.seed = 0.5" in err.value.what


def test_ssh_sites_are_refused_with_the_reason(home, tmp_path):
    with pytest.raises(HpctrainError) as err:
        load(tmp_path, "env.LR: {low: 1e-4, high: 1e-2, log: true}", site="locallab")
    assert "scheduler ssh" in err.value.what and "job.yaml:5" in str(err.value.where)


def test_values_go_into_job_keys_and_hydra_overrides(home, tmp_path):
    job = load(tmp_path, "agent.params.config.learning_rate: {low: 1e-5, high: 1e-2, log: true}\n"
                         "env.OPT: {choices: [adam, sgd]}\nargs.1: {low: 2, high: 8}")
    spec = trial_spec(job.resolved(), {"agent.params.config.learning_rate": 0.001,
                                       "env.OPT": "sgd", "args.1": 7})
    assert spec.args == ["--steps", 7, "agent.params.config.learning_rate=0.001"]
    assert spec.env["OPT"] == "sgd" and spec.search is None
    assert apply({"args": ["--lr=1"]}, {"lr": 0.5}) == {"args": ["--lr=0.5"]}
    with pytest.raises(ValueError):
        apply({"args": []}, {"lr": 0.5})
    assert max_failures(job.spec.search) == 4  # 2 x parallel beats 3


def test_the_study_script_starts_its_workers_as_one_array(home, tmp_path):
    prep = prepare(load(tmp_path, "env.LR: {low: 1e-4, high: 1e-2, log: true}"))
    assert prep.backend == "slurm" and prep.record["kind"] == "study"
    assert "#SBATCH --array=0-1" in prep.script and "#SBATCH --nodes=2" in prep.script
    assert f"#SBATCH --output={prep.run_dir}/logs/worker-%a.out" in prep.script
    assert "-m hpctrain.search.worker \"$RUN_DIR\" \"$WORKER\"" in prep.script
    assert "#SBATCH --requeue" in prep.script  # the worker requeues its allocation
    # A trial's own script is the job's launch (torchrun per node) and never requeues the worker.
    from hpctrain.search.trials import StudyJob, write_trial
    study = StudyJob(run_id="RUN", spec=prep.job.resolved(), site=prep.job.site,
                     site_ref="localcluster", source="job.yaml", workdir=str(tmp_path))
    (tmp_path / "run" / "trials" / "0003" / "rank").mkdir(parents=True)  # a killed copy's
    script, plan = write_trial(tmp_path / "run", 3, study, {"env.LR": 0.005})
    assert script == tmp_path / "run" / "trials" / "0003" / "job.sbatch"
    assert plan.nnodes == 2 and plan.preemption["requeue"] is False and plan.env["LR"] == "0.005"
    assert "not requeueing: preemption.requeue is false" in script.read_text()
    assert (script.parent / "rank" / "before" / "bootstrap.py").is_file()


def test_local_study_script(home, tmp_path):
    prep = prepare(_local(tmp_path))
    assert prep.backend == "local" and "for (( i = 0; i < 2; i++ ))" in prep.script


def _local(tmp_path):
    path = tmp_path / "local.yaml"
    path.write_text("name: st\nscript: train.py\nargs: ['--lr=0.1']\n"
                    "search: {params: {lr: {low: 1e-4, high: 1.0, log: true}}, parallel: 2}\n")
    return load_job(str(path), site="local")


# ---------------------------------------------------------------------------- search/ (Optuna)

import optuna  # noqa: E402  (the `search` extra: the unit tier runs with every extra)


def test_spaces_become_optuna_distributions(home, tmp_path):
    from hpctrain.search.spaces import distributions, pruner, sampler
    job = load(tmp_path, "env.LR: {low: 1e-4, high: 1e-2, log: true}\nargs.1: {low: 2, high: 8}\n"
                         "env.OPT: {choices: [adam, sgd]}")
    d = distributions(job.spec.search)
    assert d["env.LR"] == optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)
    assert d["args.1"] == optuna.distributions.IntDistribution(2, 8)
    assert d["env.OPT"] == optuna.distributions.CategoricalDistribution(["adam", "sgd"])
    assert isinstance(sampler(job.spec.search), optuna.samplers.TPESampler)
    assert isinstance(pruner(job.spec.search), optuna.pruners.MedianPruner)


def test_the_journal_is_refused_unless_a_regular_file(tmp_path):
    from hpctrain.search.journal import check_journal, journal_path
    path = journal_path(tmp_path)
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    with pytest.raises(HpctrainError, match="not a regular file"):
        check_journal(path)
    path.unlink()
    (tmp_path / "elsewhere").write_text("")
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(HpctrainError, match="not a regular file"):
        check_journal(path)


def test_the_journal_holds_the_study_and_a_torn_line_leaves_it_readable(home, tmp_path):
    from hpctrain.search import journal
    job = load(tmp_path, "env.LR: {low: 1e-4, high: 1e-2, log: true}")
    journal.create(tmp_path, "RUN", job.spec.search)
    study = journal.load(tmp_path, "RUN", job.spec.search)
    t = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    study.tell(t, 1.0)
    with open(journal.journal_path(tmp_path), "a") as f:
        # A writer killed mid-line (the trial's end, cut before its newline).
        f.write('{"op_code": 5, "worker_id": "x", "trial_id": 0, "state": 1, "values": [3.0], '
                '"datetime_complete": "2026-01-01T00:00:00.000000", "extra"')
    # A reader reads past the torn last line; a writer cuts it off before it appends, so that
    # its own line does not run on from it (a bad line before good ones fails every reader).
    reader = optuna.load_study(study_name="RUN", storage=journal.storage(tmp_path))
    assert len(reader.get_trials()) == 1
    again = journal.load(tmp_path, "RUN", job.spec.search)
    assert journal.journal_path(tmp_path).read_bytes().endswith(b"}\n")
    again.tell(again.ask({"x": optuna.distributions.FloatDistribution(0, 1)}), 2.0)
    fresh = optuna.load_study(study_name="RUN", storage=journal.storage(tmp_path))
    assert fresh.user_attrs["n_trials"] == 6 and [t.value for t in fresh.get_trials()] == [1.0, 2.0]


def _trial(number, state, cause=None, minute=0):
    import datetime
    attrs = {"fail_cause": cause} if cause else {}
    return optuna.trial.FrozenTrial(
        number=number, state=state, value=1.0 if state == optuna.trial.TrialState.COMPLETE else None,
        values=None, datetime_start=datetime.datetime(2026, 1, 1),
        datetime_complete=datetime.datetime(2026, 1, 1, 0, minute) if state.is_finished() else None,
        params={}, distributions={}, user_attrs=attrs, system_attrs={}, intermediate_values={},
        trial_id=number)


def test_what_counts_and_failures_in_a_row():
    from hpctrain.search.rules import SURPLUS, WORKER_GONE
    from hpctrain.search.worker import counted, failures_in_a_row, surplus
    S = optuna.trial.TrialState
    trials = [_trial(0, S.FAIL, "boom", 1), _trial(1, S.COMPLETE, minute=2),
              _trial(2, S.FAIL, "x", 3), _trial(3, S.FAIL, WORKER_GONE, 4),
              _trial(4, S.FAIL, "newest", 5), _trial(5, S.RUNNING), _trial(6, S.FAIL, SURPLUS, 6)]
    assert counted(trials) == 5
    # Two workers asked for the 5th and last counted trial at once: the later one gives it back.
    assert not surplus(trials[:5], 4, 4) and surplus(trials[:5] + [_trial(7, S.RUNNING)], 7, 4)
    assert failures_in_a_row(trials) == (2, "newest")


def test_another_trial_fits_the_time_left():
    from hpctrain.search.allocation import fits
    assert fits([], 1000.0, 999.0) and fits([100.0], None, 0.0)
    assert fits([100.0, 120.0, 110.0], 1000.0, 870.0)  # 130 s left, 121 s needed
    assert not fits([100.0, 120.0, 110.0], 1000.0, 900.0)


def test_the_study_scripts_pass_shellcheck(home, tmp_path):
    import subprocess
    from tests.shellcheck import SHELLCHECK
    files = []
    for name, prep in (("slurm", prepare(load(tmp_path, "env.LR: {low: 1e-4, high: 1e-2}"))),
                       ("local", prepare(_local(tmp_path)))):
        path = tmp_path / f"study-{name}.sh"
        path.write_text(prep.script)
        files.append(str(path))
    proc = subprocess.run([SHELLCHECK, "--severity=style", "--shell=bash", *files],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout

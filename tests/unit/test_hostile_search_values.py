"""Hostile numbers in a study's search: section (issue 50): every value the study's engine
cannot take (Optuna's distributions and samplers, numpy's seeding, PBT's explore, the study's
JSON record) is refused at load with its file:line, instead of killing every worker while a
trial stays RUNNING; the edges that pass are shown to work in the real engine.

- spaces: NaN, +-infinity, 1e308*10 (YAML's 1.0e+309, also as text), a range wider than the
  largest float, int bounds past 2**53 (and past any float), non-finite or equal choices,
  low > high and low == high, booleans where a number is expected;
- seeds: outside 0..2**32-1, or pushed past it by the per-worker offset (journal.load); a
  resume that grew n_trials wraps instead of failing;
- workers: `parallel` bounded by this machine's CPUs on the local site, by the site's array
  size on Slurm; the other counts of search: and search.pbt: refuse NaN, infinity, huge and
  booleans;
- search.metric blank; PBT given optuna-only keys (n_trials, sampler, pruner, warmup_steps):
  one warning each, at its line, saying why it has no effect.
"""
from __future__ import annotations

import math
import random
import textwrap

import msgspec
import pytest

from hpctrain.errors import HpctrainError
from hpctrain.job.load import load_job
from hpctrain.job.machine import RANKS_PER_CPU, local_cpus
from hpctrain.job.search import MAX_INT_BOUND, MAX_SEED, worker_seed
from hpctrain.schema.spec import Pbt, Search, SearchParam
from tests.hostile import tried

JOB = """\
name: st
script: train.py
args: ["--lr=0.1"]
resources: {{nodes: 1, time: "00:10:00"}}
search:
{search}
"""
SPACE_LINE = 6  # the line of the parameter in JOB with `params: {lr: SPACE}` first


def _path(tmp_path, search: str):
    path = tmp_path / "job.yaml"
    path.write_text(JOB.format(search=textwrap.indent(search, "  ")))
    return path


def load(tmp_path, search: str, site: str = "localcluster"):
    return load_job(str(_path(tmp_path, search)), site=site)


def refused(tmp_path, search: str, site: str = "localcluster") -> HpctrainError:
    tried("search values")
    with pytest.raises(HpctrainError) as err:
        load(tmp_path, search, site)
    return err.value


# ----------------------------------------------------------------------------- spaces

@pytest.mark.parametrize("space, says", [
    ("{low: .nan, high: 1}", "has low nan: a bound must be a finite number"),
    ("{low: 0, high: .inf}", "has high inf: a bound must be a finite number"),
    ("{low: -.inf, high: 0}", "has low -inf"),
    ("{low: 0, high: 1.0e+309}", "has high inf"),  # 1e308 * 10 overflows to infinity
    ("{low: 'nan', high: 1}", "has low nan"),  # text the schema reads as a number
    ("{low: '-Infinity', high: 1}", "has low -inf"),
    ("{low: 0.0, high: '1e999'}", "has high inf"),
    ("{low: -1.0e+308, high: 1.0e+308}", "wider than the largest float"),
    ("{low: -9.0e+307, high: 9.0e+307}", "wider than the largest float"),
    (f"{{low: 0, high: {MAX_INT_BOUND + 1}}}", "must lie within +-2**53"),
    (f"{{type: int, low: -{10 ** 400}, high: 0}}", "must lie within +-2**53"),
    (f"{{type: float, low: 0, high: {10 ** 400}}}", "a bound must be a finite number"),
    ("{low: 2, high: 1}", "low 2 >= high 1"),
    ("{low: 1, high: 1}", "low 1 >= high 1"),
    ("{low: 0.5, high: 0.5, log: true}", "low 0.5 >= high 0.5"),
    ("{low: 0, high: 1, log: true}", "log scale, so its bounds must be > 0"),
    ("{low: -1.0e-3, high: 1.0e-3, log: true}", "log scale"),
    ("{type: int, low: 0, high: 8, log: true}", "log scale"),
    ("{type: int, low: 1.5, high: 8}", "whole numbers"),
    ("{low: true, high: 5}", "got `bool`"),
    ("{low: 1, high: false}", "got `bool`"),
    ("{low: 1, high: 2, log: 1}", "expected `bool`"),
    ("{choices: [.nan, 0.1]}", "has the choice nan"),
    ("{choices: [0.1, -.inf]}", "has the choice -inf"),
    ("{choices: [0.1, 1.0e+309]}", "has the choice inf"),
    ("{choices: [1, 1.0]}", "choices 1 and 1.0, which are equal to Optuna"),
    ("{choices: [true, 1]}", "choices True and 1, which are equal"),
    ("{choices: [adam, sgd, adam]}", "choices 'adam' and 'adam'"),
])
def test_a_space_the_engine_cannot_take_is_one_error_at_its_line(home, tmp_path, space, says):
    err = refused(tmp_path, f"params: {{lr: {space}}}")
    assert says in err.what, str(err)
    assert err.where == f"{tmp_path / 'job.yaml'}:{SPACE_LINE}", str(err)
    assert "\n" not in err.what


def test_the_refused_spaces_are_what_the_engine_cannot_take():
    """Why each rule: numpy's uniform (Optuna's samplers) refuses a range wider than the largest
    float, an int space past floats cannot be made at all, and the study's JSON record turns NaN
    and infinity into null, which a worker cannot read back as a space."""
    import optuna
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    with pytest.raises(OverflowError), pytest.warns(RuntimeWarning):  # "Range exceeds valid bounds"
        study.ask({"x": optuna.distributions.FloatDistribution(-1e308, 1e308)})
    with pytest.raises(OverflowError):  # "int too large to convert to float"
        study.ask({"x": optuna.distributions.IntDistribution(0, 10 ** 400)})
    written = msgspec.json.encode(SearchParam(choices=[float("nan")]))
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(written, type=SearchParam)
    assert msgspec.json.encode(SearchParam(low=0.0, high=float("inf"))) == \
        b'{"low":0.0,"high":null}'


# TPE's Parzen estimator overflows inside (numpy warns) on ranges near the largest float, and
# still returns a value within the bounds: that is what is asserted.
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_the_widest_spaces_that_pass_work_in_optuna_and_in_pbt(home, tmp_path):
    """The edges validate accepts: a float range just under the largest float, int bounds at
    +-2**53, a tiny positive log bound; each sampled by TPE and random (as the workers do) and
    perturbed by PBT's explore, every value finite and within its bounds."""
    import optuna
    from hpctrain.search.pbt import explore
    from hpctrain.search.spaces import distributions, sampler
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    (tmp_path / "train.py").write_text("")
    params = textwrap.dedent(f"""\
        params:
          env.F: {{low: -8.0e+307, high: 8.0e+307}}
          env.I: {{low: -{MAX_INT_BOUND}, high: {MAX_INT_BOUND}}}
          env.L: {{low: 1.0e-300, high: 1.0e+300, log: true}}
          env.C: {{choices: [1, 2.5, 'x', false, -1.0e+308]}}
        n_trials: 4""")
    search = load(tmp_path, params).spec.search
    dists = distributions(search)
    for kind in ("tpe", "random"):
        study = optuna.create_study(sampler=sampler(msgspec.structs.replace(search, sampler=kind,
                                                                            seed=3)))
        for i in range(4):
            trial = study.ask(dists)
            study.tell(trial, float(i))
            for key, value in trial.params.items():
                p = search.params[key]
                if p.kind != "categorical":
                    assert math.isfinite(value) and p.low <= value <= p.high, (key, value)
    rng = random.Random(5)
    for factors in ([0.01, 100.0], [1.0]):
        population = msgspec.structs.replace(search, method="pbt",
                                              pbt=Pbt(interval=1, steps=2, factors=factors))
        for _ in range(20):
            values = explore.initial(population, rng)
            for key, value in explore.explore(population, values, rng).items():
                p = search.params[key]
                if p.kind != "categorical":
                    assert math.isfinite(value) and p.low <= value <= p.high, (key, value)


# ----------------------------------------------------------------------------- seeds

@pytest.mark.parametrize("seed, says", [
    ("-1", "expected `int` >= 0"),
    (str(2 ** 32), f"expected `int` <= {MAX_SEED}"),
    (str(10 ** 30), f"expected `int` <= {MAX_SEED}"),
    ("true", "got `bool`"),
    ("1.5", "got `float`"),
    (".nan", "got `float`"),
    ("'7'", "got `str`"),
])
def test_a_seed_numpy_cannot_take_is_refused(home, tmp_path, seed, says):
    err = refused(tmp_path, f"params: {{lr: {{low: 0.1, high: 1}}}}\nseed: {seed}")
    assert says in err.what and err.where.endswith("job.yaml:7"), str(err)


def test_the_seed_plus_every_workers_offset_stays_within_numpys_range(home, tmp_path):
    """Worker i seeds its sampler with seed + 1000 i + the trials it ran (journal.load): the
    highest seed that keeps the last worker's last seed within 2**32-1 passes, one more is
    refused with the highest that fits; a population's members run no trials."""
    (tmp_path / "train.py").write_text("")
    top = MAX_SEED - 1000 * 2 - 6
    study = "params: {{lr: {{low: 0.1, high: 1}}}}\nparallel: 3\nn_trials: 6\nseed: {}"
    assert load(tmp_path, study.format(top)).spec.search.seed == top
    err = refused(tmp_path, study.format(top + 1))
    assert "too large for 3 worker(s) and 6 trial(s)" in err.what and f"up to {MAX_SEED + 1}" \
        in err.what and err.where.endswith("job.yaml:9") and f"at most {top}" in err.fix, str(err)
    pbt = ("method: pbt\nparams: {{lr: {{low: 0.1, high: 1}}}}\nparallel: 4\n"
           "pbt: {{interval: 10, steps: 100}}\nseed: {}")
    assert load(tmp_path, pbt.format(MAX_SEED - 3000)).spec.search.seed == MAX_SEED - 3000
    err = refused(tmp_path, pbt.format(MAX_SEED - 2999))
    assert "too large for 4 worker(s):" in err.what and "trials" not in err.what, str(err)


def test_a_worker_past_the_top_seed_wraps_instead_of_failing(home, tmp_path):
    """A `submit --resume` may raise n_trials past what validate saw: the worker's sampler
    seed wraps to 0 (numpy would refuse it), through the real journal and Optuna."""
    from hpctrain.search import journal
    assert worker_seed(MAX_SEED, 0, 0) == MAX_SEED and worker_seed(MAX_SEED, 0, 1) == 0
    assert worker_seed(5, 2, 3) == 2008
    search = msgspec.convert({"params": {"x": {"low": 0.0, "high": 1.0}}, "seed": MAX_SEED - 1,
                              "sampler": "random"}, Search)
    journal.create(tmp_path, "RUN", search)
    study = journal.load(tmp_path, "RUN", search, worker=0)
    import optuna
    for _ in range(3):  # trials worker 0 ran: its next seed is MAX_SEED + 2
        trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
        trial.set_user_attr("worker", 0)
        study.tell(trial, 1.0)
    again = journal.load(tmp_path, "RUN", search, worker=0)
    assert 0 <= again.ask().number


# ----------------------------------------------------------------------------- workers and counts

def test_local_parallel_is_bounded_by_this_machines_cpus(home, tmp_path):
    """parallel: 1000000 on the local site would start that many processes: refused with the
    limit (RANKS_PER_CPU ranks per CPU this process may use) and the fix; the limit
    itself passes; ranks per trial count."""
    (tmp_path / "train.py").write_text("")
    limit = RANKS_PER_CPU * local_cpus()
    err = refused(tmp_path, "params: {lr: {low: 0.1, high: 1}}\nparallel: 1000000", site="local")
    assert f"this machine gives hpctrain {local_cpus()} CPU(s): at most {limit} at once" \
        in err.what and err.where.endswith("job.yaml:7"), str(err)
    assert f"search.parallel: {limit} or fewer" in err.fix and "--site" in err.fix
    assert load(tmp_path, f"params: {{lr: {{low: 0.1, high: 1}}}}\nparallel: {limit}",
                site="local").spec.search.parallel == limit
    path = _path(tmp_path, f"params: {{lr: {{low: 0.1, high: 1}}}}\nparallel: {limit}")
    with pytest.raises(HpctrainError) as info:  # 4 ranks per trial: a quarter of the workers
        load_job(str(path), site="local", overrides=["resources.procs_per_node=4"])
    assert f"at most {max(1, limit // 4)} at once" in info.value.what


def test_slurm_parallel_is_bounded_by_the_sites_array_size(home, tmp_path):
    (tmp_path / "train.py").write_text("")
    err = refused(tmp_path, "params: {lr: {low: 0.1, high: 1}}\nparallel: 1000000")
    assert "one job array" in err.what and "at most 1001 task(s)" in err.what and \
        "limits.max_array_size" in err.fix and err.where.endswith("job.yaml:7"), str(err)
    site = tmp_path / "small.yaml"
    site.write_text("name: small\nscheduler: slurm\nlimits: {max_array_size: 8}\n")
    err = refused(tmp_path, "params: {lr: {low: 0.1, high: 1}}\nparallel: 9", site=str(site))
    assert "at most 8 task(s)" in err.what, str(err)
    assert load(tmp_path, "params: {lr: {low: 0.1, high: 1}}\nparallel: 8",
                site=str(site)).spec.search.parallel == 8


COUNTS = {  # key (with what it needs beside it) -> its line in the job file
    "n_trials": 7, "parallel": 7, "warmup_steps": 7, "max_failures": 7,
    "pbt.interval": 9, "pbt.steps": 9, "pbt.fraction": 9, "pbt.factors": 9, "pbt.keep": 9,
    "pbt.resample_probability": 9,
}
HOSTILE_NUMBERS = [".nan", ".inf", "-.inf", "1.0e+309", str(10 ** 30), "true", "-1", "0"]


def test_every_count_of_search_and_pbt_refuses_hostile_numbers(home, tmp_path):
    for key, line in COUNTS.items():
        for value in HOSTILE_NUMBERS:
            if key.startswith("pbt."):
                name = key.split(".")[1]
                pbt = {"interval": "10", "steps": "100", name: value}
                if name == "factors":
                    pbt[name] = f"[{value}]"
                text = ("method: pbt\nparams: {lr: {low: 0.1, high: 1}}\nparallel: 4\npbt: {"
                        + ", ".join(f"{k}: {v}" for k, v in pbt.items()) + "}")
            else:
                text = f"params: {{lr: {{low: 0.1, high: 1}}}}\n{key}: {value}"
            if (key, value) in (("warmup_steps", "0"), ("pbt.resample_probability", "0")):
                continue  # no warm-up at all is a warm-up; never drawn afresh, a probability
            err = refused(tmp_path, text)
            assert err.where.endswith(f"job.yaml:{line}"), (key, value, str(err))


# ----------------------------------------------------------------------------- metric, PBT's keys

@pytest.mark.parametrize("metric, says", [
    ("''", "search.metric is empty"), ("'   '", "search.metric is empty"),
    ("' reward'", "has spaces around it"), ("'reward\u3000'", "has spaces around it"),
])
def test_a_blank_metric_is_refused_with_the_fix(home, tmp_path, metric, says):
    err = refused(tmp_path, f"params: {{lr: {{low: 0.1, high: 1}}}}\nmetric: {metric}")
    assert says in err.what and err.where.endswith("job.yaml:7"), str(err)
    assert "metric: reward" in err.fix, str(err)


def test_pbt_names_each_optuna_only_key_it_was_given_and_why(home, tmp_path):
    (tmp_path / "train.py").write_text("")
    job = load(tmp_path, "method: pbt\nparams: {lr: {low: 0.1, high: 1}}\nparallel: 4\n"
                         "pbt: {interval: 10, steps: 100}\nn_trials: 50\npruner: hyperband\n"
                         "sampler: random\nwarmup_steps: 5\nmax_failures: 2")
    path = tmp_path / "job.yaml"
    said = {w.split(": ")[1].split()[0]: w for w in job.warnings if "search.method pbt" in w}
    assert set(said) == {"search.n_trials", "search.pruner", "search.sampler",
                         "search.warmup_steps"}, job.warnings
    assert said["search.n_trials"].startswith(f"{path}:10: ") and "no trials" in \
        said["search.n_trials"]
    assert said["search.pruner"].startswith(f"{path}:11: ") and "never stopped early" in \
        said["search.pruner"]
    quiet = load(tmp_path, "method: pbt\nparams: {lr: {low: 0.1, high: 1}}\nparallel: 4\n"
                           "pbt: {interval: 10, steps: 100}")
    assert not [w for w in quiet.warnings if "search.method pbt" in w], quiet.warnings
    study = load(tmp_path, "params: {lr: {low: 0.1, high: 1}}\nn_trials: 50\npruner: hyperband")
    assert not [w for w in study.warnings if "search.method pbt" in w], study.warnings


def test_validate_shows_a_studys_warnings(home, tmp_path, monkeypatch):
    """`validate` prints the plan's warnings: for a study, the study job's (a trial's job is
    made without the checks), PBT's ignored keys among them, each once."""
    import io
    from contextlib import redirect_stdout
    from hpctrain.cli import main
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    path = _path(tmp_path, "method: pbt\nparams: {lr: {low: 0.1, high: 1}}\nparallel: 2\n"
                           "pbt: {interval: 10, steps: 100}\npruner: hyperband")
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["validate", str(path), "--site", "localcluster"]) == 0
    shown = [line for line in out.getvalue().splitlines() if "search.pruner" in line]
    assert len(shown) == 1 and shown[0].split()[0] == "warning" and f"{path}:10:" in shown[0]

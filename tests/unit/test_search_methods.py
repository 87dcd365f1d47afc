"""search/ as a seam (issue 51): each method answers every question the CLI, the Python handle
and submission ask through one interface (search/methods.py), so that none of them asks which
method a run is; a population keeps no Optuna journal; both methods launch through one
Allocation (search/allocation.py)."""
import ast
import inspect
from pathlib import Path

import pytest

from hpctrain.job.load import load_job
from hpctrain.runs.records import Run
from hpctrain.search import methods
from hpctrain.search.journal import journal_path
from hpctrain.submission import prepare, write_run

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = [name for name, f in vars(methods.Method).items()
             if inspect.isfunction(f) and not name.startswith("_")]


@pytest.mark.parametrize("name", sorted(methods.METHODS))
def test_every_method_answers_every_question(name):
    method = methods.named(name)
    assert method.name == name and method.kind and method.worker.startswith("hpctrain.search.")
    for question in QUESTIONS:
        if question in ("create", "resume"):  # a method may keep nothing, or need nothing
            continue
        assert getattr(type(method), question) is not getattr(methods.Method, question), \
            f"method {name} does not answer {question}"


def test_no_caller_asks_which_method_a_run_is():
    """The CLI, the handle and submission name no method: they ask the run's."""
    for rel in ("hpctrain/cli.py", "hpctrain/search/handle.py", "hpctrain/submission.py"):
        tree = ast.parse((ROOT / rel).read_text())
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
            {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        constants = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
        assert not {"_pbt", "is_population"} & names, rel
        assert not {"pbt", "optuna", "hpctrain.search.pbt.member", "hpctrain.search.worker"} \
            & constants, rel


def _study(tmp_path, method: str) -> Run:
    search = ({"method": "pbt", "params": {"lr": {"low": 1e-5, "high": 1e-1, "log": True}},
               "parallel": 2, "pbt": {"interval": 4, "steps": 40}} if method == "pbt" else
              {"params": {"lr": {"low": 1e-5, "high": 1e-1, "log": True}}, "n_trials": 3,
               "parallel": 2})
    (tmp_path / "train.py").write_text("")
    job = load_job({"name": "st", "script": str(tmp_path / "train.py"), "args": ["--lr=0.01"],
                    "search": search}, site="local")
    with write_run(prepare(job)) as run:
        return run


def test_a_population_keeps_no_optuna_journal_and_a_study_does(home, tmp_path):
    pop, study = _study(tmp_path, "pbt"), _study(tmp_path, "optuna")
    assert methods.of(pop) is methods.named("pbt") and methods.of(study) is methods.named("optuna")
    assert not journal_path(pop.path).exists() and journal_path(study.path).is_file()
    assert "-m hpctrain.search.pbt.member " in (pop.path / pop.record.script).read_text()
    assert "-m hpctrain.search.worker " in (study.path / study.record.script).read_text()
    # What follows a population reads its lineage, never a journal.
    assert methods.of(pop).rows(pop) and all(r.state == "not started" for r in methods.of(pop).rows(pop))


def test_a_run_whose_study_job_cannot_be_read_is_optunas_whose_reading_says_why(home, tmp_path):
    run = _study(tmp_path, "pbt")
    (run.path / "study" / "job.json").write_text('{"spec": {"search": {"method": "asha"}}}')
    assert methods.of(run) is methods.named("optuna")
    (run.path / "study" / "job.json").write_text("[" * 100)
    assert methods.of(run) is methods.named("optuna")

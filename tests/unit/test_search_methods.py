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


class Scheduler:
    """A scheduler's answers inside a job (Backend's allocation methods), as a test sets them."""
    preemption = True
    runs_here = False

    def __init__(self, restarts=0, running=True):
        self.restarts, self.running, self.requeued = restarts, running, []

    def allocation_ref(self):
        return "77_0"

    def allocation_nodes(self):
        return "node1"

    def allocation_end(self, ref):
        return None

    def allocation_restarts(self):
        return self.restarts

    def allocation_running(self, ref):
        return self.running

    def requeue_allocation(self, ref):
        self.requeued.append(ref)


def _allocation(tmp_path, monkeypatch, scheduler, end=None, **pre):
    import hpctrain.search.allocation as allocation
    from hpctrain.schema.spec import Preemption
    monkeypatch.setattr(allocation, "REQUEUED_WAIT", 0)
    (tmp_path / "study").mkdir(exist_ok=True)
    a = allocation.Allocation(tmp_path, scheduler, Preemption(**pre), worker=0)
    a.end = end
    return a


def test_the_time_limit_warning_requeues_without_counting_against_max_requeues(tmp_path, monkeypatch):
    """A study outlives its workers' time limit (issue 51 item 4): the warning mid-trial
    requeues for the study's time, recorded apart, however many times it came before; other
    requeues still meet preemption.max_requeues, less the ones for time."""
    import signal
    import time
    sched = Scheduler(restarts=7)
    a = _allocation(tmp_path, monkeypatch, sched, end=time.time() + 60, max_requeues=3)
    (tmp_path / "study" / "workers").mkdir()
    (tmp_path / "study" / "workers" / "0.json").write_text('{"job": "77_0", "for_time": 5}')
    a.on_signal(signal.SIGUSR2, None)  # the time-limit warning (lead_time 120 s: it is near)
    assert a.for_time and a.after_signal("trial 3") == 0 and sched.requeued == ["77_0"]
    assert a.requeues_for_time() == 6
    # A preemption now (7 restarts, 6 of them for time: 1 counted) is requeued, up to 3.
    b = _allocation(tmp_path, monkeypatch, sched, end=time.time() + 3600, max_requeues=3)
    b.on_signal(signal.SIGUSR2, None)  # far from the end: not the time-limit warning
    assert not b.for_time and b.after_signal("trial 3") == 0 and len(sched.requeued) == 2
    sched.restarts = 9  # 3 counted requeues: no more
    c = _allocation(tmp_path, monkeypatch, sched, end=None, max_requeues=3)
    c.on_signal(signal.SIGTERM, None)
    assert c.after_signal("trial 3") == 128 + signal.SIGTERM and len(sched.requeued) == 2
    # requeue: false in the job: never.
    d = _allocation(tmp_path, monkeypatch, sched, end=time.time() + 60, requeue=False)
    d.on_signal(signal.SIGUSR2, None)
    assert d.after_signal("trial 3") == 128 + signal.SIGUSR2 and len(sched.requeued) == 2


def test_the_record_of_requeues_for_time_is_untrusted(tmp_path, monkeypatch):
    a = _allocation(tmp_path, monkeypatch, Scheduler())
    path = tmp_path / "study" / "workers" / "0.json"
    path.parent.mkdir()
    for text in ('{"job": "76_0", "for_time": 5}', '{"job": "77_0", "for_time": -1}',
                 '{"job": "77_0", "for_time": true}', '{"job": "77_0", "for_time": 1e9}',
                 "[" * 10000, '{"job": "77_0", "for_time": ' + "9" * 5000 + "}", "\xff"):
        path.write_text(text, errors="surrogateescape") if text != "\xff" else path.write_bytes(b"\xff")
        assert a.requeues_for_time() == 0, text
    path.unlink()
    victim = tmp_path / "victim.json"
    victim.write_text('{"job": "77_0", "for_time": 4}')
    path.symlink_to(victim)
    assert a.requeue("cannot fit", for_time=True) == 0  # never written through a link
    assert victim.read_text() == '{"job": "77_0", "for_time": 4}'


def test_a_worker_that_cannot_fit_another_trial_requeues_while_trials_are_left(tmp_path, monkeypatch):
    """The worker's loop: the time left cannot fit the median trial, the study needs more: its
    allocation is requeued (for time) instead of ending the study short."""
    import time
    sched = Scheduler()
    a = _allocation(tmp_path, monkeypatch, sched, end=time.time() + 30)
    a.durations = [40.0]
    assert not a.fits_another() and a.can_requeue()
    assert a.requeue("the time left cannot fit another trial (3 not started yet)", for_time=True) == 0
    assert sched.requeued == ["77_0"] and a.requeues_for_time() == 1
    sched.running = False  # cancelled meanwhile, or timed out: nothing to requeue
    assert not a.can_requeue()

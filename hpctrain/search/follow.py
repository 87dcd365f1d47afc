"""Following a study, as data: its trials (state, parameters, reported metric, worker and nodes,
where it was pruned), the best so far and what is left (`status STUDY`, `list`, the Python
Study); what each trial cost and what pruning saved (`report STUDY`). follow/ shows runs; a study
is a run whose journal (reading.py) says more, and this is the one place that reads it.

Every value taken out of the journal is untrusted: numbers must be finite and within bounds, text
is made printable and cut (rank/printable.clean), ids must match their patterns, a trial's
directory is derived from its number (never taken from the record), and a value of the wrong
type is left out as if it were missing.
"""
from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import msgspec

from ..errors import HpctrainError
from ..rank.printable import clean
from ..runs.records import Run, trial_dir
from ..runs.untrusted import JOB_ID, job_doc
from .reading import JOURNAL, MAX_JOURNAL, load, size
from .rules import better, counts

MAX_PARAMS = 64  # parameters shown per trial
MAX_TRIALS = 1_000_000
MAX_STEP = 1 << 62
TIME = (0.0, 1e11)  # epoch seconds
STATES = ("RUNNING", "WAITING", "COMPLETE", "PRUNED", "FAIL")


class TrialRow(msgspec.Struct, kw_only=True):
    number: int
    state: str  # Optuna's: RUNNING, WAITING, COMPLETE, PRUNED, FAIL
    params: dict[str, Any]  # name -> value (float, int, str, bool or None), checked
    value: float | None = None  # the value told at the end (COMPLETE)
    latest: float | None = None  # the newest reported value
    latest_step: int | None = None
    best: float | None = None  # its best reported (or final) value, in the study's direction
    reports: int = 0  # values reported to the pruner
    worker: int | None = None
    nodes: str | None = None
    job_id: str | None = None
    started: float | None = None
    ended: float | None = None
    seconds: float | None = None  # ended (or now, while it runs) - started
    attempts: int | None = None
    pruned_step: int | None = None
    fail_cause: str | None = None
    directory: str = ""  # RUN_DIR/trials/NNNN


class StudyStatus(msgspec.Struct, kw_only=True):
    run_id: str
    name: str
    path: str
    journal: str
    metric: str | None
    direction: str  # maximize | minimize
    n_trials: int | None  # the trials the study asks for
    parallel: int | None  # workers at once
    stopped: str | None  # why the study stopped itself, when it did
    counts: dict[str, int]  # trials per state
    left: int | None  # trials not started yet
    best: TrialRow | None
    trials: list[TrialRow]


class Best(msgspec.Struct, kw_only=True):
    """What a study found: the best completed trial's number, value and parameters."""
    number: int
    value: float
    params: dict[str, Any]
    metric: str | None
    direction: str
    run_id: str


# ----------------------------------------------------------------------------- checking

def finite(v, lo: float = -1e300, hi: float = 1e300) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi:
        return float(v)
    return None


def count(v, hi: int = MAX_TRIALS, lo: int = 0) -> int | None:
    return v if type(v) is int and lo <= v <= hi else None


def text(v, bound: int = 200) -> str | None:
    return clean(v, bound) if isinstance(v, str) else None


def param(v) -> Any:
    """A parameter's value as it may be shown and written: a finite number, a bool, None, or
    printable text of at most 120 characters (a categorical choice is anything JSON holds)."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v if abs(v) < 1 << 63 else None
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    return clean(v if isinstance(v, str) else repr(v), 120)


def _direction(study) -> str:
    try:
        return "minimize" if study.directions[0].name == "MINIMIZE" else "maximize"
    except (AttributeError, IndexError):
        return "maximize"


def row(trial, run_path, direction: str, now: float | None) -> TrialRow | None:
    """One trial's checked record; None when its number is not a trial number. now: where a
    running trial's length ends (None: it has none)."""
    number = count(trial.number)
    if number is None:
        return None
    state = trial.state.name if trial.state.name in STATES else "FAIL"
    params = {}
    for k, v in list(trial.params.items())[:MAX_PARAMS]:
        name = text(k, 80)
        if name:
            params[name] = param(v)
    values = getattr(trial, "values", None) or []
    final = finite(values[0]) if state == "COMPLETE" and values else None
    reported = sorted((s, finite(v)) for s, v in trial.intermediate_values.items()
                      if count(s, MAX_STEP) is not None)
    reported = [(s, v) for s, v in reported if v is not None]
    attrs = trial.user_attrs if isinstance(trial.user_attrs, dict) else {}
    r = TrialRow(number=number, state=state, params=params, value=final,
                 reports=len(reported), directory=str(trial_dir(run_path, number)))
    if reported:
        r.latest_step, r.latest = reported[-1]
    for v in [v for _, v in reported] + ([final] if final is not None else []):
        if r.best is None or better(v, r.best, direction):
            r.best = v
    r.worker = count(attrs.get("worker"), 1 << 20)
    r.nodes = text(attrs.get("nodes"), 200)
    job = attrs.get("job_id")
    r.job_id = job if isinstance(job, str) and JOB_ID.fullmatch(job) else None
    r.started = finite(attrs.get("started"), *TIME)
    r.ended = finite(attrs.get("ended"), *TIME)
    if r.started is None and trial.datetime_start is not None:
        r.started = finite(trial.datetime_start.timestamp(), *TIME)
    if r.ended is None and trial.datetime_complete is not None:
        r.ended = finite(trial.datetime_complete.timestamp(), *TIME)
    end = r.ended if r.ended is not None else (now if state == "RUNNING" else None)
    if r.started is not None and end is not None:
        r.seconds = finite(end - r.started, 0.0, 1e9)
    r.attempts = count(attrs.get("attempts"), 1 << 20)
    r.pruned_step = count(attrs.get("pruned_step"), MAX_STEP)
    if state == "PRUNED" and r.pruned_step is None:
        r.pruned_step = r.latest_step  # Optuna's own rule: a pruned trial ends at its last report
    r.fail_cause = text(attrs.get("fail_cause"), 300)
    return r


def counts_toward(r: TrialRow) -> bool:
    """Whether a trial counts toward n_trials (rules.counts)."""
    return r.state != "FAIL" or counts(r.fail_cause)


# ----------------------------------------------------------------------------- reading

def is_study(run: Run) -> bool:
    """A run that is a study: its record says so, or it has a study journal (whatever kind of
    file: reading it says what is wrong with it)."""
    try:
        kind = run.record.kind
    except HpctrainError:
        kind = None
    return kind == "study" or os.path.lexists(run.path / JOURNAL)


def read(run: Run, now: float | None = None, limit: int = MAX_JOURNAL):
    """(StudyStatus, the Optuna trials it was made from) for the study run; its journal read
    up to `limit` bytes (HpctrainError beyond)."""
    rec = run.record
    study, trials = load(run.path, run.id, limit)
    now = time.time() if now is None else now
    direction = _direction(study)
    attrs = study.user_attrs if isinstance(study.user_attrs, dict) else {}
    # A trial still RUNNING in the journal of a run that has ended was cut short with its
    # worker (kill -9, a node lost): it has no length to count, not one that grows for ever.
    rows = [r for r in (row(t, run.path, direction, None if rec.final else now) for t in trials)
            if r is not None]
    rows.sort(key=lambda r: r.number)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.state] = counts.get(r.state, 0) + 1
    best = None
    for r in rows:
        if r.state == "COMPLETE" and r.value is not None and (
                best is None or better(r.value, best.value, direction)):
            best = r
    n_trials = count(attrs.get("n_trials"))
    started = sum(1 for r in rows if r.state != "WAITING" and counts_toward(r))
    st = StudyStatus(
        run_id=run.id, name=rec.name, path=str(run.path), journal=str(run.path / JOURNAL),
        metric=text(attrs.get("metric"), 100), direction=direction, n_trials=n_trials,
        parallel=count(attrs.get("parallel"), 1 << 20), stopped=text(attrs.get("stopped"), 300),
        counts=counts, left=None if n_trials is None else max(0, n_trials - started),
        best=best, trials=rows)
    return st, trials


def status(run: Run, now: float | None = None, limit: int = MAX_JOURNAL) -> StudyStatus:
    return read(run, now, limit)[0]


def best(run: Run) -> Best:
    """The best completed trial; HpctrainError while none has completed."""
    st = status(run)
    if st.best is None or st.best.value is None:
        done = ", ".join(f"{n} {s.lower()}" for s, n in sorted(st.counts.items())) or "no trials yet"
        raise HpctrainError(f"study {st.run_id} has no completed trial yet ({done})",
                            fix=f"wait for one (hpctrain status {st.run_id})")
    return Best(number=st.best.number, value=st.best.value, params=dict(st.best.params),
                metric=st.metric, direction=st.direction, run_id=st.run_id)


# `list` shows one line per run, and must stay quick with many studies in its table: it reads
# a journal only up to LIST_JOURNAL (some 50,000 trials' records, under a second), and all of
# them together up to LIST_BYTES; a larger one's row says so and where to look at it.
LIST_JOURNAL = 8 << 20
LIST_BYTES = 32 << 20


def listed(run: Run, budget: list[int]) -> tuple[str, StudyStatus | None]:
    """A study's one-line summary for `list` and its status (None when it was not read, too
    large for a list). budget: [bytes of journals `list` may still read], charged here.
    HpctrainError when the journal cannot be read, as for `status`."""
    n = size(run.path) or 0
    if n > LIST_JOURNAL:
        return (f"study: too large to list ({max(1, n >> 20)} MiB journal; hpctrain status "
                f"{run.id})", None)
    if n > budget[0]:
        return f"study: not read for this list (hpctrain status {run.id})", None
    budget[0] -= n
    st = status(run, limit=LIST_JOURNAL)
    return summary(st), st


def summary(st: StudyStatus) -> str:
    """One phrase for `list`: trials done of the total, and the best so far."""
    done = sum(1 for r in st.trials if r.state in ("COMPLETE", "PRUNED", "FAIL") and counts_toward(r))
    total = st.n_trials if st.n_trials is not None else len(st.trials)
    text_ = f"{done}/{total} trials"  # the table gives it what is left of 80 columns
    if st.best is not None and st.best.value is not None:
        text_ += f", best {st.best.value:.4g} #{st.best.number}"
    if st.counts.get("RUNNING"):
        text_ += f", {st.counts['RUNNING']} running"
    if st.stopped:
        text_ += f"; stopped: {st.stopped}"
    return text_


# ----------------------------------------------------------------------------- cost

class TrialCost(msgspec.Struct, kw_only=True):
    number: int
    state: str
    seconds: float | None
    gpus: int
    gpu_hours: float | None
    node_hours: float | None
    source: str  # samples (the trial's usage files) | shape (its time x the job's shape) | none


class StudyReport(msgspec.Struct, kw_only=True):
    run_id: str
    name: str
    nodes: int  # per trial: the job's shape
    gpus_per_node: int
    trials: list[TrialCost]
    gpu_hours: float
    node_hours: float
    mean_complete_s: float | None  # the mean length of a completed trial
    pruned: int
    saved_gpu_hours: float | None  # estimated: what the pruned trials would have cost in full
    saved_node_hours: float | None


def gpus_per_node(run: Run) -> int:
    """The job's resources.gpus_per_node: from the study's job (study/job.json, read typed and
    bounded), else a job.yaml in the run directory; 0 when neither says."""
    import msgspec
    from .trials import read_study_job
    try:
        resources = read_study_job(run.path).spec.get("resources")
    except (OSError, ValueError, msgspec.DecodeError):
        resources = job_doc(run.path).get("resources")
    gpus = resources.get("gpus_per_node") if isinstance(resources, dict) else None
    return count(gpus, 4096) or 0


def cost(run: Run) -> StudyReport:
    """GPU-hours (and node-hours) per trial: from the samplers' files in its directory where
    they recorded GPUs (follow/report.py), else its wall time x the job's nodes x GPUs per
    node. Pruning saved, estimated: for each pruned trial, the mean length of the completed
    trials less its own, at its size."""
    from ..follow.report import directory_report
    st = status(run)
    rec = run.record
    nodes, per_node = rec.nodes, gpus_per_node(run)
    gpus = nodes * per_node
    costs = []
    for r in st.trials:
        c = TrialCost(number=r.number, state=r.state, seconds=r.seconds, gpus=gpus,
                      gpu_hours=None, node_hours=None, source="none")
        if r.seconds is not None:
            c.gpu_hours, c.node_hours, c.source = gpus * r.seconds / 3600, nodes * r.seconds / 3600, "shape"
        if os.path.isdir(os.path.join(r.directory, "usage")):
            sampled = directory_report(r.directory, run.id, rec.name, r.number)
            if sampled.gpu_hours_allocated > 0 and sampled.allocation_source != "none":
                c.gpu_hours, c.source = sampled.gpu_hours_allocated, "samples"
        costs.append(c)
    complete = [r.seconds for r in st.trials if r.state == "COMPLETE" and r.seconds is not None]
    mean = sum(complete) / len(complete) if complete else None
    pruned = [r for r in st.trials if r.state == "PRUNED" and r.seconds is not None]
    saved_s = sum(max(0.0, mean - r.seconds) for r in pruned) if mean is not None else None
    return StudyReport(
        run_id=run.id, name=rec.name, nodes=nodes, gpus_per_node=per_node, trials=costs,
        gpu_hours=sum(c.gpu_hours or 0.0 for c in costs),
        node_hours=sum(c.node_hours or 0.0 for c in costs), mean_complete_s=mean,
        pruned=st.counts.get("PRUNED", 0),
        saved_gpu_hours=None if saved_s is None else saved_s * gpus / 3600,
        saved_node_hours=None if saved_s is None else saved_s * nodes / 3600)

"""A study's `search:` section: its spaces checked at load, and a trial's values put into a job.

A parameter names a key path as a sweep's grid does (env.LR, args.1, seed, library keys), or a
Hydra override already in `args` (`agent.params.config.learning_rate=3e-4`, `--lr=0.1`): a
trial replaces that argument's value. The study itself (Optuna) is hpctrain/search/; this
module knows nothing of it, so that `validate` needs no Optuna.
"""
from __future__ import annotations

import math

import msgspec

from ..errors import HpctrainError
from ..schema.spec import JobSpec, SearchParam, set_path
from .checks import SWEEP_FIXED, array_limit
from .machine import bound_text, local_slots

# The prefixes an argument may carry before a Hydra-style key: +key=, --key=, key=.
_ARG_PREFIXES = ("", "+", "--")
FAILURES_IN_A_ROW = 3


def max_failures(search) -> int:
    """Failed trials in a row that stop the study (a setting that breaks every trial)."""
    return search.max_failures or max(FAILURES_IN_A_ROW, 2 * search.parallel)


def _arg_index(args: list, key: str) -> int | None:
    for i, arg in enumerate(map(str, args)):
        for prefix in _ARG_PREFIXES:
            if arg.startswith(f"{prefix}{key}="):
                return i
    return None


def is_job_key(key: str) -> bool:
    return key.split(".")[0] in JobSpec.__struct_fields__


def apply(data: dict, values: dict) -> dict:
    """A copy of the job document `data` with a trial's {key.path: value} in it: a job key by
    its path, a Hydra override in args by replacing its value. ValueError when a path is not
    the job's."""
    for key, value in values.items():
        if is_job_key(key):
            data = set_path(data, tuple(key.split(".")), value)
            continue
        args = list(data.get("args") or [])
        i = _arg_index(args, key)
        if i is None:
            raise ValueError(f"'{key}' is neither a job key nor an argument {key}=... in args")
        head = str(args[i]).split("=", 1)[0]
        args[i] = f"{head}={value}"
        data = dict(data, args=args)
    return data


# What the study's engine takes of a space, refused at load instead of killing every worker:
# - Optuna draws a float space with numpy's uniform(low, high), which raises OverflowError for a
#   range wider than the largest float (1.8e308): "Range exceeds valid bounds".
# - It keeps an int space's values as floats (IntDistribution.to_internal_repr), exact only up to
#   2**53; past 1.8e308 float() itself fails. PBT multiplies them as floats too.
# - The study's record (study/job.json) and a member's lineage are JSON, in which msgspec writes
#   NaN and infinity as null: every worker would fail to read its own study back.
MAX_INT_BOUND = 2 ** 53
# numpy's RandomState (Optuna's samplers) takes seeds 0..2**32-1 and raises ValueError beyond.
MAX_SEED = 2 ** 32 - 1
# A worker's sampler seed: the study's, plus this per worker, plus the trials it ran so far.
SEED_PER_WORKER = 1000


def worker_seed(seed: int, worker: int, ran: int) -> int:
    """The sampler seed of worker `worker` after `ran` trials of its own: apart from every other
    worker's, the same again after a requeue. check_search keeps it within numpy's range for
    the study as submitted; a `submit --resume` that raised n_trials may pass MAX_SEED, and
    wraps to 0 rather than end every worker."""
    return (seed + SEED_PER_WORKER * worker + ran) % (MAX_SEED + 1)


def _not_finite(value) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return not math.isfinite(float(value))
    except OverflowError:  # an int past the largest float
        return True


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"


def _choices_error(p: SearchParam) -> str | None:
    seen: dict = {}
    for choice in p.choices:
        if _not_finite(choice):
            return (f"has the choice {_shown(choice)}: the study's record is JSON, which has no "
                    "NaN or infinity (every worker would fail to read the study back)")
        if choice in seen:  # 1, 1.0 and true are one key, as they are equal
            # Optuna finds a trial's choice by ==: it would record the first of the two.
            return (f"has the choices {seen[choice]!r} and {choice!r}, which are equal to Optuna "
                    "(1 == 1.0 == true): a trial given the second would be recorded as the first")
        seen[choice] = choice
    return None


def _bounds_error(kind: str, p: SearchParam) -> str | None:
    for name in ("low", "high"):
        value = getattr(p, name)
        if kind == "int" and abs(value) > MAX_INT_BOUND:
            return (f"has {name} {_shown(value)}: an int parameter's bounds must lie within "
                    f"+-2**53 ({MAX_INT_BOUND}), where Optuna, which keeps them as floats, still "
                    "tells every whole number apart")
        if _not_finite(value):
            return (f"has {name} {_shown(value)}: a bound must be a finite number within "
                    "+-1.8e308 (the study's record is JSON, which has no NaN or infinity)")
    if kind == "float" and not math.isfinite(float(p.high) - float(p.low)):
        return (f"spans {p.low} to {p.high}, wider than the largest float (1.8e308): Optuna's "
                "sampler (numpy's uniform) cannot draw from it")
    return None


def _space_error(key: str, p: SearchParam) -> str | None:
    kind = p.kind
    if kind == "categorical":
        if not p.choices:
            return "has no choices"
        if p.low is not None or p.high is not None or p.log:
            return "is categorical: it takes choices, not low/high/log"
        return _choices_error(p)
    if p.choices:
        return f"is {kind}: it takes low and high, not choices"
    if p.low is None and p.high is None and p.type is None:
        return "has no choices and no low/high"
    if p.low is None or p.high is None:
        return "needs both low and high"
    if kind == "int" and not all(isinstance(v, int) for v in (p.low, p.high)):
        return "is an int parameter: low and high must be whole numbers"
    why = _bounds_error(kind, p)
    if why:
        return why
    if p.low >= p.high:
        return f"has low {p.low} >= high {p.high}"
    if p.log and p.low <= 0:
        return f"is on a log scale, so its bounds must be > 0 (low is {p.low})"
    return None


def check_search(spec: JobSpec, where) -> list[dict]:
    """The search section's own mistakes, each one HpctrainError at its key; returns the points
    a load must validate as whole jobs (each bound and each choice of every parameter)."""
    search = spec.search
    from .pbt import check_pbt
    check_pbt(spec, where)
    if not search.params:
        raise HpctrainError("search.params is empty", where(("search", "params")),
                            "give at least one parameter, e.g. env.LR: {low: 1e-4, high: 1e-2, "
                            "log: true}")
    _check_metric(search.metric, where)
    _check_seed(search, where)
    grid = set()
    if spec.sweep is not None:
        grid = set(spec.sweep.grid) | {k for v in spec.sweep.variants for k in v}
        if spec.sweep.seeds:
            grid.add("seed")
    points = []
    for key, p in search.params.items():
        at = where(("search", "params", key))
        if key in grid:
            raise HpctrainError(f"search.params.{key} is also varied by sweep:", at,
                                f"vary '{key}' in one of them: remove it from sweep: or search:")
        if key.split(".")[0] in (*SWEEP_FIXED, "search"):
            raise HpctrainError(f"search.params.{key}: '{key.split('.')[0]}' must be the same for "
                                "every trial (every worker is one allocation of the job's shape)",
                                at, f"remove '{key}' from search.params")
        why = _space_error(key, p)
        if why:
            raise HpctrainError(f"search.params.{key} {why}", at,
                                "e.g. {low: 1e-5, high: 1e-2, log: true}, {low: 1, high: 8}, "
                                "or {choices: [a, b]}")
        if not is_job_key(key) and _arg_index(spec.args, key) is None:
            raise HpctrainError(f"search.params.{key}: the job has no key '{key}' and no argument "
                                f"{key}=... in args", at,
                                f"name a job key (env.X, args.N, seed) or add {key}=<default> to "
                                "args")
        values = list(p.choices) if p.kind == "categorical" else [p.low, p.high]
        points += [{key: v} for v in values]
    if spec.sweep is not None:
        raise HpctrainError("a job with search: cannot also have sweep:", where(("sweep",)),
                            "run the study and the sweep as separate jobs")
    return points


def _check_metric(metric: str, where) -> None:
    """The name the ranks report the metric under (hpctrain_progress.report(step, reward=...)):
    a blank one, or one with spaces around it, is never reported, so every trial would fail
    with "no value reported" after running to its end."""
    if not metric.strip():
        raise HpctrainError("search.metric is empty: no rank can report a metric without a name, "
                            "so every trial would run to its end and fail", where(("search", "metric")),
                            "name the metric the ranks report, e.g. metric: reward "
                            "(hpctrain_progress.report(step, reward=...))")
    if metric != metric.strip():
        raise HpctrainError(f"search.metric {metric!r} has spaces around it: the ranks report "
                            f"{metric.strip()!r}, never this name", where(("search", "metric")),
                            f"metric: {metric.strip()}")


def _check_seed(search, where) -> None:
    """Each worker seeds its sampler with worker_seed(): the study's seed, plus 1000 per worker,
    plus the trials it ran; numpy takes no seed past 2**32-1 (the schema holds the seed itself to
    0..2**32-1)."""
    if search.seed is None:
        return
    ran = search.n_trials if search.method == "optuna" else 0  # a PBT member asks for none
    top = search.seed + SEED_PER_WORKER * (search.parallel - 1) + ran
    if top > MAX_SEED:
        highest = max(0, MAX_SEED - SEED_PER_WORKER * (search.parallel - 1) - ran)
        each = f"seed + {SEED_PER_WORKER} x i" + (" + the trials it ran" if ran else "")
        raise HpctrainError(
            f"search.seed {search.seed} is too large for {search.parallel} worker(s)"
            + (f" and {ran} trial(s)" if ran else "") + f": worker i seeds its sampler with "
            f"{each}, up to {top}, and numpy's seeds end at 2**32-1 ({MAX_SEED})",
            where(("search", "seed")), f"give a seed of at most {highest}")


def check_workers(spec: JobSpec, site, scheduler, where) -> None:
    """How many workers the site can start: on the local site each is a process of this machine
    (with its trial's ranks), on Slurm each is a task of one job array."""
    parallel = spec.search.parallel
    at = where(("search", "parallel"))
    if scheduler.runs_here:
        limit = local_slots(spec)
        if parallel > limit:
            raise HpctrainError(
                f"search.parallel is {parallel}: on site '{site.name}' every worker is a process "
                f"of this machine running one trial at a time; {bound_text(spec)}", at,
                f"set search.parallel: {limit} or fewer, or run the study on a cluster site "
                "(--site NAME)")
        return
    limit = array_limit(site)
    if parallel > limit:
        raise HpctrainError(f"search.parallel is {parallel}: its workers are one job array, and "
                            f"site '{site.name}' allows arrays of at most {limit} task(s)", at,
                            f"set search.parallel: {limit} or fewer (each worker runs trial after "
                            "trial), or raise the site's limits.max_array_size if the cluster's "
                            "MaxArraySize allows")


def shape(spec: JobSpec) -> str:
    """What `validate` and `submit --dry-run` say of a study."""
    s, r = spec.search, spec.resources
    if s.method == "pbt":
        from .pbt import shape as pbt_shape
        return pbt_shape(spec)
    each = f"{r.nodes} node(s) x {r.gpus_per_node or 0} GPU(s)"
    if r.time:
        each += f", time {r.time}"
    params = ", ".join(s.params)
    return (f"study: {s.n_trials} trial(s) of {params}; {s.parallel} worker(s), each an "
            f"allocation of {each}, running trials one after another; {s.direction} "
            f"'{s.metric}', sampler {s.sampler}, pruner {s.pruner}")


def trial_spec(spec_doc: dict, values: dict) -> JobSpec:
    """The JobSpec of one trial: the study's resolved job with the trial's values in it."""
    doc = apply(dict(spec_doc), values)
    doc.pop("search", None)
    return msgspec.convert(doc, JobSpec)


class StudyPlan(msgspec.Struct, frozen=True, kw_only=True):
    """The study's own script (templates/<scheduler>/study.sh.j2): its workers, not a launch."""
    name: str
    site: str
    backend: str
    run_dir: str
    directives: list[tuple[str, str | None]]
    parallel: int
    n_trials: int
    nnodes: int
    nproc_per_node: int
    python: list[str]  # hpctrain's own interpreter (Optuna installed): the workers run under it
    version: str = ""
    worker: str  # the module each worker runs (search/methods.py: the method's)


def study_directives(first, run_dir: str, parallel: int) -> list[tuple[str, str | None]]:
    """A trial's directives (every trial has the study job's shape), one log per worker, and
    the array of workers."""
    d = [(k, v) for k, v in first.directives if k != "output"]
    d.append(("output", f"{run_dir}/logs/worker-%a.out"))
    d.append(("array", f"0-{parallel - 1}"))
    return d


def first_values(search) -> dict:
    """A trial's values for planning the study before any trial exists (each space's low end)."""
    return {k: (p.choices[0] if p.kind == "categorical" else p.low)
            for k, p in search.params.items()}

"""`hpctrain report RUN`: what a run cost and how well it used its GPUs.

From the run's records: each node's samples (usage/NODE.jsonl, rank/during/sampler.py; what
their lines say: follow/samples.py), the allocation the head node recorded at each attempt's
start (status/allocation-JOB-ATTEMPT.json, from `scontrol show job`), `sacct` where the cluster
keeps accounting, and the ranks' progress (follow/progress.py). Everything read from the run
directory is untrusted: regular files only, each bounded, and at most MAX_SAMPLES samples per
run (or sweep task) directory.

    GPU-hours allocated   per attempt: GPUs allocated x the attempt's elapsed time (sacct's
                          AllocTRES x Elapsed; else the scontrol record's GPUs; else the GPUs the
                          samples saw), summed over every attempt
    GPU-hours used        the same, each GPU weighted by its mean utilization
    per GPU / per rank    mean and 10th-percentile utilization (nearest rank), memory peak
                          against the GPU's total, mean power; a CPU node's ranks: CPU % and RSS
    time lost             between attempts (a requeue, a preemption), and before each attempt's
                          first training step (start, rendezvous, loading); a node swapped for
                          a spare (status/replacements.jsonl): failure to training again
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import msgspec

from ..errors import HpctrainError
from ..rank.printable import shown
from ..rank.records import RankIdentity, read_identities
from ..rank.during.sampler import node_file_stem
from ..runs import evaluations
from ..runs.records import Run
from ..runs.untrusted import Budget, job_doc, read_lines, read_regular, writing
from .progress import TrainingProgress, of_directory
from .samples import (MAX_ATTEMPTS, MAX_GPUS, MAX_RANK, GpuSamples, SampledAttempt, Samples, integer,
                      number, read_samples)
from .startup import attempts as startup_attempts, replacements
from .display import evaluation_lines

MAX_SAMPLES = 500_000  # samples read per run (or sweep task) directory, all nodes together
MAX_USAGE_BYTES = 256 << 20  # bytes read per run (or sweep task) directory
MAX_NODES = 4096
MAX_RANKS = 4096  # ranks listed per run (or sweep task) directory
_NODE_FILE = re.compile(r"[A-Za-z0-9._-]{1,200}\.jsonl")
_ALLOC_FILE = re.compile(r"allocation-([0-9]{1,20})-([0-9]{1,6})\.json")


class GpuStats(msgspec.Struct, kw_only=True):
    node: str
    index: int
    uuid: str | None
    samples: int
    mean_util: float | None
    p10_util: float | None
    mem_peak_mib: float | None
    mem_total_mib: float | None
    mean_power_w: float | None


class RankStats(msgspec.Struct, kw_only=True):
    rank: int
    node: str | None
    gpu: int | None  # the GPU it used (its local rank), when the node had GPUs
    mean_util: float | None = None
    p10_util: float | None = None
    mean_cpu_pct: float | None = None  # of one core
    max_rss_mib: float | None = None
    steps_per_s: float | None = None
    step: int | None = None


class Attempt(msgspec.Struct, kw_only=True):
    job_id: str
    attempt: int
    start: float
    end: float
    elapsed_s: float
    gpus: int  # allocated
    gpus_source: str  # sacct | scontrol | samples | none
    gpu_hours: float
    gpu_hours_used: float | None
    first_step_s: float | None  # from the start to the first progress report
    state: str | None = None  # the scheduler's (sacct): COMPLETED, REQUEUED, FAILED, ...
    lost_s: float = 0.0  # before its first step; all of it when it ended without one


class Report(msgspec.Struct, kw_only=True):
    run_id: str
    name: str
    task: int | None = None
    attempts: list[Attempt] = []
    gpu_hours_allocated: float = 0.0
    gpu_hours_used: float | None = None
    allocation_source: str = "none"
    gpus: list[GpuStats] = []
    ranks: list[RankStats] = []
    steps_per_s: float | None = None
    step: int | None = None
    metric: str | None = None
    value: float | None = None
    lost_between_attempts_s: float = 0.0
    lost_before_first_step_s: float = 0.0
    # resources.spare_nodes: nodes swapped inside the allocation (rank/before/spares.py), and the
    # seconds from each failure to training again, summed (those not training again: none).
    replacements: int = 0
    lost_to_replacements_s: float = 0.0
    cpu_efficiency: float | None = None  # CPU time / (CPUs allocated x elapsed)
    max_rss_mib: float | None = None
    cpu_source: str = "none"  # accounting | samples | none
    sampler_cpu_pct: dict[str, float] = {}  # per node: the sampler's CPU time / its wall time
    errors: list[str] = []  # what the samplers recorded going wrong
    plot: str | None = None
    tasks: list["Report"] = []  # a sweep's
    by_cost: list[int] = []  # a sweep's tasks, most GPU-hours first
    by_metric: list[int] = []  # a sweep's tasks, best metric first
    # The run's evaluation records (runs/evaluations.py) and the ones that could not be read.
    evaluations: list[dict] = []
    evaluation_problems: list[str] = []


# ----------------------------------------------------------------------------- reading

def p10(values: list[float]) -> float | None:
    """The 10th percentile, nearest rank: the value below which at most a tenth of the samples lie."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.1 * len(ordered)) - 1)]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def read_usage(directory: str, budget: Budget | None = None) -> dict[str, list[dict]]:
    """node -> its sampler's lines (dicts), in order; damaged lines left out. Bounded for the
    whole directory, not per file (budget: MAX_USAGE_BYTES and MAX_SAMPLES in all), each line
    too (read_lines): forty hard links of one large file cost what one does, a file with no
    newline costs one line's bound."""
    usage = os.path.join(directory, "usage")
    try:
        names = sorted(n for n in os.listdir(usage) if _NODE_FILE.fullmatch(n))[:MAX_NODES]
    except OSError:
        return {}
    budget = budget or Budget(MAX_USAGE_BYTES, MAX_NODES)
    out: dict[str, list[dict]] = {}
    samples = 0
    for name in names:
        lines: list[dict] = []
        try:
            for raw in read_lines(os.path.join(usage, name), budget, MAX_USAGE_BYTES,
                                  max_lines=MAX_SAMPLES - samples):
                try:
                    rec = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(rec, dict):
                    lines.append(rec)
        except OSError:
            pass  # what was read before the bound or the error is kept
        samples += len(lines)
        out[name[:-len(".jsonl")]] = lines
        if samples >= MAX_SAMPLES:
            break
    return out


def _allocations(directory: str) -> dict[tuple[str, int], dict]:
    """(job, attempt) -> what the head node's scontrol said at the attempt's start
    (status/allocation-JOB-ATTEMPT.json, rank/during/sampler.py)."""
    status = os.path.join(directory, "status")
    try:
        names = [n for n in os.listdir(status) if _ALLOC_FILE.fullmatch(n)][:MAX_ATTEMPTS]
    except OSError:
        return {}
    out = {}
    for name in names:
        try:
            rec = json.loads(read_regular(os.path.join(status, name), 65536))
        except (OSError, ValueError):
            continue
        m = _ALLOC_FILE.fullmatch(name)
        if isinstance(rec, dict):
            out[(m.group(1), int(m.group(2)))] = rec
    return out


def _accounting(run: Run, job_ids: list[str]) -> list[dict] | None:
    """The scheduler's accounting of every attempt of these jobs (Backend.accounting), or None."""
    from ..backends import for_run
    since = number(getattr(run.record, "submitted_ts", None))  # (a minute's slack for clocks)
    try:
        return for_run(run).accounting(job_ids, since=since - 60 if since else None)
    except (HpctrainError, OSError):
        return None


# ----------------------------------------------------------------------------- one directory

# Metrics whose lower values are better (the rest, rewards and returns first, are maximised).
_LOWER_IS_BETTER = re.compile(r"loss|error|err\b|regret|perplexity|ppl|cost|distance|mse|mae|rmse|nll|wer|cer",
                              re.IGNORECASE)


def lower_is_better(metric: str | None) -> bool:
    return bool(metric) and bool(_LOWER_IS_BETTER.search(metric))


_ENDED_WELL = {"COMPLETED", "RUNNING", "PENDING", "SUSPENDED"}


def _job_ids(run: Run | None, task: int | None, attempts: dict) -> list[str]:
    """The jobs to ask the scheduler about: those the samplers saw, and the run's own (an array
    task as JOB_TASK), so that a run with no samples is accounted too."""
    ids = {k[0] for k in attempts}
    job = getattr(run.record, "job_id", None) if run is not None else None
    if job is not None and str(job).isdigit():
        ids.add(f"{job}_{task}" if task is not None else str(job))
    return sorted(ids)


def directory_report(directory: str, run_id: str, name: str, task: int | None = None,
                     run: Run | None = None) -> Report:
    """One run (or sweep task) directory's report. Each part comes from its own records: the
    samplers' (follow/samples.py), the head node's allocation records, the scheduler's
    accounting (with `run`), the spare-node swaps and the ranks' identities and progress."""
    usage = read_usage(directory)
    allocations = _allocations(directory)
    idents: dict[int, RankIdentity] = {i.rank: i for i in read_identities(directory)
                                       if integer(i.rank, MAX_RANK) is not None}
    samples = read_samples(usage)
    report = Report(run_id=run_id, name=name, task=task,
                    sampler_cpu_pct=samples.sampler_cpu_pct, errors=samples.errors)
    accounted = _accounting(run, _job_ids(run, task, samples.attempts)) if run is not None else None

    report.attempts = _attempts(samples.attempts, accounted or [], allocations)
    report.gpu_hours_allocated = sum(a.gpu_hours for a in report.attempts)
    used = [a.gpu_hours_used for a in report.attempts if a.gpu_hours_used is not None]
    report.gpu_hours_used = sum(used) if used else None
    report.allocation_source = "+".join(sorted({a.gpus_source for a in report.attempts} - {"none"})) or "none"
    report.lost_between_attempts_s = sum(max(0.0, b.start - a.end)
                                         for a, b in zip(report.attempts, report.attempts[1:]))
    report.lost_before_first_step_s = sum(a.lost_s for a in report.attempts)
    swaps = replacements(directory, startup_attempts(directory))
    report.replacements = len(swaps)
    report.lost_to_replacements_s = sum(r["back_s"] or 0.0 for r in swaps)

    report.gpus = [_gpu_stats(key, samples.gpus[key]) for key in sorted(samples.gpus)
                   if samples.gpus[key].util]
    progress = of_directory(directory, task)
    if progress:
        report.steps_per_s, report.step = progress.rate, progress.step
        report.metric, report.value = progress.metric, progress.value
    report.ranks = _rank_stats(idents, samples, progress)
    if accounted and all(v.get("total_cpu_s") is not None and v.get("cpus") for v in accounted):
        report.cpu_efficiency, report.max_rss_mib = _cpu_use_accounted(accounted)
        report.cpu_source = "accounting"
    elif samples.rank_cpu:
        report.cpu_efficiency, report.max_rss_mib = _cpu_use_sampled(samples, allocations)
        report.cpu_source = "samples"
    return report


def _attempts(sampled: dict[tuple[str, int], SampledAttempt], accounted: list[dict],
              allocations: dict[tuple[str, int], dict]) -> list[Attempt]:
    """Every attempt the samplers or the scheduler know of, in the order they started."""
    by_attempt = {(a["job_id"], a["attempt"]): a for a in accounted}

    def start(k):
        return by_attempt[k]["start"] if k in by_attempt else sampled[k].start
    ordered = sorted(set(sampled) | set(by_attempt), key=lambda k: (start(k), k))[:MAX_ATTEMPTS]
    return [_attempt(key, sampled.get(key), by_attempt.get(key), allocations.get(key),
                     last=i == len(ordered) - 1) for i, key in enumerate(ordered)]


def _attempt(key: tuple[str, int], sampled: SampledAttempt | None, acct: dict | None,
             alloc: dict | None, last: bool) -> Attempt:
    a = sampled or SampledAttempt(start=None, end=None)
    if acct is not None:
        # The scheduler's time: from the allocation's start to its end (or now, running),
        # not the sampler's window (which opens after the launch and closes before teardown).
        start, elapsed = acct["start"], acct["elapsed_s"]
        end = acct["end"] if acct["end"] is not None else start + elapsed
    else:
        start, end = a.start, a.end
        elapsed = max(0.0, end - start)
    gpus, source = _gpus_allocated(a, acct, alloc)
    means = [m for m in (_mean(a.util.get(g, [])) for g in sorted(a.gpus)) if m is not None]
    # Each sampled GPU's mean utilization x the attempt's time (an allocated GPU that was never
    # sampled counts as idle).
    used = sum(means) / 100.0 * elapsed / 3600.0 if means else None
    first = max(0.0, a.first - start) if a.first else None
    state = acct["state"] if acct is not None else None
    if first is not None:
        lost = min(first, elapsed)
    elif (state is not None and state not in _ENDED_WELL) or (state is None and not last):
        lost = elapsed  # ended (failed, requeued, preempted) before its first step
    else:
        lost = 0.0
    return Attempt(job_id=key[0], attempt=key[1], start=start, end=end, elapsed_s=elapsed,
                   gpus=gpus, gpus_source=source, gpu_hours=gpus * elapsed / 3600.0,
                   gpu_hours_used=used, first_step_s=first, state=state, lost_s=lost)


def _gpus_allocated(a: SampledAttempt, acct: dict | None, alloc: dict | None) -> tuple[int, str]:
    """An attempt's GPUs and who said so, most trusted first: the scheduler's accounting, the
    head node's scontrol record, the GPUs the samplers saw."""
    if acct is not None and acct["gpus"]:
        return acct["gpus"], "accounting"
    if alloc is not None and integer(alloc.get("gpus"), MAX_GPUS) is not None:
        return alloc["gpus"], "scontrol"
    if a.gpus:
        return len(a.gpus), "samples"
    if acct is not None:
        return 0, "accounting"
    return 0, "none"


def _gpu_stats(key: tuple[str, int], gpu: GpuSamples) -> GpuStats:
    node, index = key
    return GpuStats(node=node, index=index, uuid=gpu.uuid, samples=len(gpu.util),
                    mean_util=_mean(gpu.util), p10_util=p10(gpu.util), mem_peak_mib=gpu.peak,
                    mem_total_mib=gpu.mem_total, mean_power_w=_mean(gpu.power))


def _rank_stats(idents: dict[int, RankIdentity], samples: Samples,
                progress: TrainingProgress | None) -> list[RankStats]:
    """Every rank that recorded its identity, was sampled or reported progress: its GPU's use
    (the one its local rank names on its node), its CPU and memory, its rate."""
    rates = {r.rank: r for r in progress.ranks} if progress else {}
    out = []
    for rank in sorted(set(idents) | set(samples.rank_cpu) | set(rates))[:MAX_RANKS]:
        ident = idents.get(rank)
        stats = RankStats(rank=rank, node=ident.node if ident else None, gpu=None)
        if ident is not None:
            gpu = samples.gpus.get((node_file_stem(ident.node), ident.local_rank))
            if gpu is not None and gpu.util:
                stats.gpu, stats.mean_util, stats.p10_util = ident.local_rank, _mean(gpu.util), p10(gpu.util)
        if rank in samples.rank_cpu:
            stats.mean_cpu_pct = _mean(samples.rank_cpu[rank])
            stats.max_rss_mib = samples.rank_rss.get(rank)
        if rank in rates:
            stats.steps_per_s, stats.step = rates[rank].rate, rates[rank].step
        out.append(stats)
    return out


def _cpu_use_accounted(accounted: list[dict]) -> tuple[float | None, float | None]:
    """CPU efficiency and MaxRSS from the scheduler's accounting of every attempt."""
    spent = sum(v["cpus"] * (v["elapsed_s"] or 0) for v in accounted)
    efficiency = (sum(v["total_cpu_s"] for v in accounted) / spent or None) if spent else None
    rss = [v["max_rss_mib"] for v in accounted if v.get("max_rss_mib") is not None]
    return efficiency, max(rss) if rss else None


def _cpu_use_sampled(samples: Samples, allocations: dict) -> tuple[float | None, float | None]:
    """The ranks' mean CPU use (in cores) against the CPUs allocated: scontrol's count for the
    job, else the CPUs the samplers found usable on their nodes; and the ranks' RSS peak."""
    cpus = [a["cpus"] for a in allocations.values() if integer(a.get("cpus"), 1 << 24, 1) is not None]
    total = cpus[0] if cpus and cpus[0] else sum(samples.node_cpus.values())
    mean_total = sum(_mean(v) or 0.0 for v in samples.rank_cpu.values()) / 100.0
    return (mean_total / total if total else None,
            max(samples.rank_rss.values()) if samples.rank_rss else None)


# ----------------------------------------------------------------------------- runs and sweeps

def _sweep_direction(run_path) -> str | None:
    """The job's `sweep.direction` as submit wrote it into job.yaml (untrusted: only the two
    words are taken), or None."""
    try:
        sweep = job_doc(Path(run_path)).get("sweep")
    except HpctrainError:
        return None
    direction = sweep.get("direction") if isinstance(sweep, dict) else None
    return direction if direction in ("maximize", "minimize") else None


def report(run: Run, out: str | None = None) -> Report:
    rec = run.record
    if out is not None:  # a format matplotlib cannot write is refused before the work
        from .plot import figure_path
        figure_path(out, run.path, "usage.png")
    path = str(run.path)
    if rec.array_size:
        tasks = [directory_report(os.path.join(path, "tasks", str(i)), run.id, rec.name, i, run)
                 for i in range(min(rec.array_size, 100_000))]
        whole = Report(run_id=run.id, name=rec.name, tasks=tasks)
        whole.gpu_hours_allocated = sum(t.gpu_hours_allocated for t in tasks)
        used = [t.gpu_hours_used for t in tasks if t.gpu_hours_used is not None]
        whole.gpu_hours_used = sum(used) if used else None
        whole.allocation_source = "+".join(sorted({s for t in tasks for s in t.allocation_source.split("+")} - {"none"})) or "none"
        whole.lost_between_attempts_s = sum(t.lost_between_attempts_s for t in tasks)
        whole.lost_before_first_step_s = sum(t.lost_before_first_step_s for t in tasks)
        whole.by_cost = [t.task for t in sorted(tasks, key=lambda t: (-t.gpu_hours_allocated, t.task))]
        # Best first, in the metric's direction: the sweep's own, else a loss's lowest and a
        # reward's highest.
        scored = [t for t in tasks if t.value is not None]
        direction = _sweep_direction(run.path)
        lower = (direction == "minimize" if direction else
                 bool(scored) and lower_is_better(scored[0].metric))
        sign = 1 if lower else -1
        whole.by_metric = [t.task for t in sorted(scored, key=lambda t: (sign * t.value, t.task))]
        result = whole
    else:
        result = directory_report(path, run.id, rec.name, None, run)
    found, result.evaluation_problems = evaluations.read(run.path)
    result.evaluations = evaluations.as_json(found)
    result.plot = draw(result, path, out)
    return result


def draw(result: Report, run_path: str, out: str | None) -> str | None:
    """Utilization over time, one line per node (its GPUs' mean; a CPU node: its ranks' CPU %),
    each attempt's start marked; None when there is nothing to draw or no matplotlib."""
    directories = ([os.path.join(run_path, "tasks", str(t.task)) for t in result.tasks]
                   if result.tasks else [run_path])
    series: dict[str, tuple[list[float], list[float]]] = {}
    starts: list[float] = []
    cpu = False
    for i, d in enumerate(directories[:64]):
        for node, lines in read_usage(d).items():
            label = node if not result.tasks else f"task {result.tasks[i].task} {node}"
            xs, ys = series.setdefault(label, ([], []))
            for rec in lines:
                if rec.get("kind") == "start" and number(rec.get("time")) is not None:
                    starts.append(rec["time"])
                t = number(rec.get("t"))
                rows = rec.get("g") if isinstance(rec.get("g"), list) else rec.get("r")
                if t is None or not isinstance(rows, list):
                    continue
                vals = [number(r[1]) for r in rows if isinstance(r, list) and len(r) >= 2]
                vals = [v for v in vals if v is not None]
                if vals:
                    cpu = cpu or "r" in rec
                    xs.append(t)
                    ys.append(sum(vals) / len(vals))
    series = {k: v for k, v in series.items() if v[0]}
    if not series:
        return None
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    from .plot import figure_path
    path, fmt, root = figure_path(out, run_path, "usage.png")
    t0 = min(min(xs) for xs, _ in series.values())
    fig = Figure(figsize=(8, 3.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for label, (xs, ys) in sorted(series.items()):
        ax.plot([(x - t0) / 60 for x in xs], ys, linewidth=1.2, label=label)
    for i, s in enumerate(sorted(set(starts))):
        ax.axvline((s - t0) / 60, color="grey", linestyle=":", linewidth=1)
        ax.annotate(f"attempt {i + 1}", ((s - t0) / 60, 1), xycoords=("data", "axes fraction"),
                    xytext=(2, -2), textcoords="offset points", va="top", fontsize=7)
    ax.set_xlabel("minutes since the first start")
    ax.set_ylabel("rank CPU % (mean)" if cpu else "GPU utilization % (mean of the node's GPUs)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"{result.name}  ({result.run_id})", fontsize=10)
    from .plot import save
    save(fig, path, fmt, root)
    return path


# ----------------------------------------------------------------------------- text

def _h(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}%"


def text(r: Report) -> str:
    lines = []
    title = f"{r.name} ({r.run_id})" + (f" task {r.task}" if r.task is not None else "")
    lines.append(title)
    used = "-" if r.gpu_hours_used is None else f"{r.gpu_hours_used:.3f}"
    lines.append(f"  GPU-hours: {r.gpu_hours_allocated:.3f} allocated ({r.allocation_source}), "
                 f"{used} used (utilization-weighted)")
    for a in r.attempts:
        first = "-" if a.first_step_s is None else f"{a.first_step_s:.0f}s"
        lines.append(f"  attempt {a.attempt} (job {a.job_id}): {_h(a.elapsed_s)} x {a.gpus} GPU(s) "
                     f"[{a.gpus_source}], first step after {first}")
    lines.append(f"  time lost: {_h(r.lost_between_attempts_s)} between attempts, "
                 f"{_h(r.lost_before_first_step_s)} before first steps")
    if r.replacements:
        lines.append(f"  node replacements: {r.replacements} (spare nodes, no requeue), "
                     f"{_h(r.lost_to_replacements_s)} from the failures to training again")
    if r.steps_per_s is not None:
        lines.append(f"  training: step {r.step}, {r.steps_per_s:.3f} steps/s"
                     + (f", {r.metric} {r.value:g}" if r.metric and r.value is not None else ""))
    for g in r.gpus:
        mem = "-" if g.mem_peak_mib is None else f"{g.mem_peak_mib:.0f}"
        total = "-" if g.mem_total_mib is None else f"{g.mem_total_mib:.0f}"
        power = "" if g.mean_power_w is None else f", {g.mean_power_w:.0f} W"
        lines.append(f"  GPU {g.node}:{g.index}: mean {_pct(g.mean_util)}, p10 {_pct(g.p10_util)}, "
                     f"memory peak {mem}/{total} MiB{power} ({g.samples} samples)")
    for k in r.ranks:
        parts = []
        if k.mean_util is not None:
            parts.append(f"GPU {k.gpu} mean {_pct(k.mean_util)} p10 {_pct(k.p10_util)}")
        if k.mean_cpu_pct is not None:
            parts.append(f"CPU {k.mean_cpu_pct:.1f}% of a core, RSS peak {k.max_rss_mib or 0:.0f} MiB")
        if k.steps_per_s is not None:
            parts.append(f"{k.steps_per_s:.3f} steps/s")
        if parts:
            lines.append(f"  rank {k.rank} ({k.node}): " + "; ".join(parts))
    if r.cpu_efficiency is not None or r.max_rss_mib is not None:
        eff = "-" if r.cpu_efficiency is None else f"{100 * r.cpu_efficiency:.1f}%"
        rss = "-" if r.max_rss_mib is None else f"{r.max_rss_mib:.0f} MiB"
        lines.append(f"  CPU efficiency {eff}, MaxRSS {rss} ({r.cpu_source})")
    if r.sampler_cpu_pct:
        lines.append("  sampler cost: " + ", ".join(f"{n} {v:.2f}% of a core"
                                                     for n, v in sorted(r.sampler_cpu_pct.items())))
    for e in r.errors:
        lines.append(f"  sampler: {e}")
    if r.tasks:
        for t in r.tasks:
            lines += ["  " + line for line in text(t).splitlines()]
        lines.append("  by cost (GPU-hours): " + ", ".join(
            f"task {i}" for i in r.by_cost))
        if r.by_metric:
            lines.append("  by metric (best first): " + ", ".join(f"task {i}" for i in r.by_metric))
    table = evaluation_lines(r.evaluations, r.evaluation_problems)
    if table:
        lines += ["  evaluation:", *("    " + line for line in table)]
    if r.plot:
        lines.append(f"  plot: {r.plot}")
    return shown("\n".join(lines))  # names, job ids and the samplers' errors are outside text


def as_json(r: Report) -> str:
    """The report as JSON, ASCII only: msgspec writes a NaN or an infinity as null, and json
    then escapes every control and non-ASCII character (\\u001b, never the byte)."""
    return json.dumps(json.loads(msgspec.json.encode(r)))

"""Following a population (`status`, `status --json`, `plot` of a PBT run): every member's
newest state, the copies, the best member with its final checkpoint and its hyperparameter
schedule (its own records, back through the members it copied). Everything comes from the
lineage files (lineage.read: bounded, typed, checked); text is made printable."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from ...errors import HpctrainError
from ...rank.printable import clean
from ...runs.records import Run
from ..rules import ranked
from ..trials import read_study_job
from . import lineage
from .lineage import Record


class Point(msgspec.Struct, kw_only=True):
    step: int | None
    score: float | None
    event: str
    params: dict[str, Any]
    parent: int | None = None  # a copy: the member it copied
    member: int | None = None  # in a schedule: whose record this is
    interval: int | None = None
    why: str = ""  # kept: why the member did not copy there
    resampled: list[str] = []  # a copy: the keys drawn afresh rather than perturbed


class MemberRow(msgspec.Struct, kw_only=True):
    member: int
    state: str  # training, ended, failed, not started
    step: int | None = None
    score: float | None = None
    params: dict[str, Any] = {}
    copies: int = 0  # times it copied another member
    restarts: int = 0
    checkpoint: str | None = None  # its newest recorded checkpoint in the workspace
    decision: str = ""  # its newest judgment: the copy it made, or why it made none
    history: list[Point] = []


class Population(msgspec.Struct, kw_only=True):
    run_id: str
    name: str
    path: str
    metric: str
    direction: str
    interval: int
    steps: int
    members: list[MemberRow]
    copies: int
    best: MemberRow | None = None
    schedule: list[Point] = []  # the best member's values over its steps, inherited ones first


def _params(p: dict) -> dict:
    return {clean(str(k))[:200]: (v if isinstance(v, (int, float, bool)) or v is None
                                  else clean(str(v))[:200]) for k, v in list(p.items())[:64]}


def _row(run_dir: Path, m: int, recs: list[Record]) -> MemberRow:
    if not recs:
        return MemberRow(member=m, state="not started")
    last = recs[-1]
    state = {"end": "ended", "failed": "failed"}.get(last.event, "training")
    scored = [r for r in recs if r.score is not None and r.event in lineage.TRAINED]
    ckpt = next((r for r in reversed(recs) if r.checkpoint and r.event in lineage.TRAINED), None)
    return MemberRow(
        member=m, state=state, step=scored[-1].step if scored else None,
        score=scored[-1].score if scored else None, params=_params(last.params),
        copies=sum(r.event == "exploit" for r in recs),
        restarts=sum(r.event == "restart" for r in recs),
        checkpoint=str(lineage.saved_path(run_dir, m, ckpt.interval, ckpt.checkpoint)) if ckpt else None,
        decision=decision(recs),
        history=[Point(step=r.step, score=r.score, event=r.event, params=_params(r.params),
                       parent=r.parent, interval=r.interval, why=clean(r.why, lineage.MAX_WHY) or "",
                       resampled=[clean(k) or "" for k in r.resampled])
                 for r in recs if r.event in ("ready", "kept", "end", "exploit")])


def decision(recs: list[Record]) -> str:
    """A member's newest judgment, in words: the copy it made, or why it made none."""
    for r in reversed(recs):
        if r.event == "exploit":
            fresh = f"; {', '.join(clean(k) or '' for k in r.resampled)} drawn afresh" \
                if r.resampled else ""
            return f"copied member {r.parent} at interval {r.interval}{fresh}"
        if r.event == "kept":
            return f"interval {r.interval}: no copy, {clean(r.why, lineage.MAX_WHY)}"
    return ""


def schedule(all_recs: dict[int, list[Record]], member: int) -> list[Point]:
    """The values `member` trained with, step by step: its records back to its newest copy,
    then those of the member it copied up to the copied interval, and so on."""
    out: list[Point] = []
    m, until, hops = member, None, 0
    while m is not None and hops <= 10_000:
        hops += 1
        recs = [r for r in all_recs.get(m, []) if until is None or r.time <= until]
        nxt = None
        for r in reversed(recs):
            if r.event not in ("ready", "end", "start", "exploit"):
                continue
            out.append(Point(step=r.step, score=r.score, event=r.event, params=_params(r.params),
                             parent=r.parent if r.event == "exploit" else None, member=m))
            if r.event == "exploit":
                parent_recs = all_recs.get(r.parent, []) if r.parent is not None else []
                at = [p for p in parent_recs if p.interval == r.parent_interval
                      and p.event in lineage.HOLDING]
                nxt, until = (r.parent, at[-1].time) if at else (None, None)
                break
        m = nxt
    out.reverse()
    return out


def bad(what: str) -> HpctrainError:
    return HpctrainError(f"the population's {what}",
                         fix="each member keeps population/member-<i>.jsonl a regular file of "
                         f"JSON lines (at most {lineage.MAX_LINEAGE >> 20} MiB) and hpctrain "
                         "writes study/job.json at submit: restore the file, or remove a "
                         "member's (its history is lost)")


def _count(v, default: int, hi: int) -> int:
    return v if type(v) is int and 0 <= v <= hi else default


def population(run: Run) -> Population:
    """The population as its lineage files tell it; HpctrainError when study/job.json or a
    member's file cannot be read (a FIFO, too large: the command that shows it says so)."""
    try:
        job = read_study_job(run.path)
    except (OSError, ValueError) as exc:
        raise bad(f"job {run.path / 'study' / 'job.json'} cannot be read: "
                   f"{getattr(exc, 'strerror', None) or exc}") from None
    s = job.spec.get("search") if isinstance(job.spec.get("search"), dict) else {}
    pbt = s.get("pbt") if isinstance(s.get("pbt"), dict) else {}
    members = _count(s.get("parallel"), 1, lineage.MAX_MEMBERS)
    try:
        recs = lineage.read_all(run.path, members)
    except OSError as exc:
        raise bad(f"lineage cannot be read: {exc}") from None
    rows = [_row(run.path, m, recs[m]) for m in sorted(recs)]
    direction = "minimize" if s.get("direction") == "minimize" else "maximize"
    scored = [r for r in rows if r.score is not None and r.checkpoint]
    best = None
    if scored:
        by_member = {r.member: r for r in scored}
        best = by_member[ranked({m: r.score for m, r in by_member.items()}, direction)[0]]
    return Population(
        run_id=job.run_id, name=clean(str(job.spec.get("name", "")))[:200], path=str(run.path),
        metric=clean(str(s.get("metric", "reward")))[:200], direction=direction,
        interval=_count(pbt.get("interval"), 0, 1 << 62), steps=_count(pbt.get("steps"), 0, 1 << 62),
        members=rows,
        copies=sum(r.copies for r in rows), best=best,
        schedule=schedule(recs, best.member) if best else [])


class BestMember(msgspec.Struct, kw_only=True):
    """What a population found (Study.best() of a PBT run): the best member's newest score, its
    values, the schedule it trained with and its checkpoint in the workspace."""
    run_id: str
    metric: str
    direction: str
    member: int
    score: float
    step: int | None
    params: dict[str, Any]
    schedule: list[Point]
    checkpoint: str


def best_member(run: Run) -> BestMember:
    """HpctrainError while no member has recorded a score with a checkpoint."""
    pop = population(run)
    b = pop.best
    if b is None or b.score is None or b.checkpoint is None:
        raise HpctrainError(f"population {pop.run_id} has no member with a recorded checkpoint "
                            "yet", fix=f"wait for one interval (hpctrain status {pop.run_id})")
    return BestMember(run_id=pop.run_id, metric=pop.metric, direction=pop.direction,
                      member=b.member, score=b.score, step=b.step, params=dict(b.params),
                      schedule=pop.schedule, checkpoint=b.checkpoint)


def shown_number(v) -> str:
    return "-" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))


def _values(p: dict) -> str:
    return ", ".join(f"{k}={shown_number(v)}" for k, v in p.items())


def format_population(pop: Population, workers: str | None = None) -> str:
    lines = [f"population {pop.name} ({pop.run_id}): {len(pop.members)} member(s), "
             f"{pop.direction} '{pop.metric}', every {pop.interval} of {pop.steps} step(s); "
             f"{pop.copies} cop{'y' if pop.copies == 1 else 'ies'}"]
    if workers:
        lines.append(f"members' allocations: {workers}")
    wide = min(max([len("newest decision")] + [len(r.decision) for r in pop.members]), 80)
    lines.append(f"{'member':>6}  {'state':<11} {'step':>7}  {pop.metric[:12]:>12}  copies  "
                 f"{'newest decision':<{wide}}  values")
    for r in pop.members:
        mark = "*" if pop.best is not None and r.member == pop.best.member else " "
        lines.append(f"{r.member:>5}{mark}  {r.state:<11} {shown_number(r.step):>7}  "
                     f"{shown_number(r.score):>12}  {r.copies:>6}  "
                     f"{(r.decision or '-')[:wide]:<{wide}}  {_values(r.params)}")
    if pop.best is None:
        lines.append("best: none yet (no member has recorded a checkpoint)")
        return "\n".join(lines)
    b = pop.best
    lines.append(f"best: member {b.member}, {pop.metric} {shown_number(b.score)} at step "
                 f"{shown_number(b.step)}")
    lines.append(f"  checkpoint: {b.checkpoint}")
    seen, steps = None, []
    for p in pop.schedule:
        text = _values(p.params)
        if text != seen:
            steps.append(f"step {shown_number(p.step)}: {text}" + (f" (copied member {p.parent})"
                                                           if p.parent is not None else ""))
            seen = text
    lines.append("  schedule: " + "; ".join(steps))
    return "\n".join(lines)


def plot(run: Run, out: str | None = None) -> str:
    """Every member's score by step with its copies marked, and the best member's schedule."""
    from ...follow.plot import figure_path, save
    path, fmt, root = figure_path(out, run.path, "population.png")
    pop = population(run)
    if not any(p.score is not None for r in pop.members for p in r.history):
        raise HpctrainError(f"population {run.id} has nothing to draw yet: no member has recorded "
                            "a score", fix="members record one at each interval; try again later")
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise HpctrainError("plotting needs matplotlib",
                            fix="pip install 'hpctrain[watch]' (tensorboard and matplotlib)") from None
    fig = Figure(figsize=(12.8, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    for r in pop.members:
        pts = [(p.step, p.score) for p in r.history if p.step is not None and p.score is not None
               and p.event != "exploit"]
        if pts:
            best = pop.best is not None and r.member == pop.best.member
            left.plot(*zip(*pts), linewidth=2.2 if best else 1, label=f"member {r.member}",
                      color=f"C{r.member % 10}")
        for p in r.history:
            if p.event == "exploit" and p.step is not None and p.score is not None:
                left.plot([p.step], [p.score], marker="v", color=f"C{r.member % 10}")
    left.set_title(f"{pop.metric} by step (v: a copy of a top member)", fontsize=10)
    left.set_xlabel("step")
    left.grid(alpha=0.3)
    left.legend(fontsize=7)
    keys = list(pop.schedule[0].params) if pop.schedule else []
    for j, key in enumerate(keys[:6]):
        pts = [(p.step, p.params.get(key)) for p in pop.schedule
               if p.step is not None and isinstance(p.params.get(key), (int, float))]
        if pts:
            right.step(*zip(*pts), where="post", label=key, color=f"C{j}")
    if pop.best is not None:
        right.set_title(f"member {pop.best.member}'s values (the best), inherited ones included",
                        fontsize=10)
    right.set_yscale("log" if keys and all(
        isinstance(p.params.get(k), (int, float)) and p.params.get(k) > 0
        for p in pop.schedule for k in keys) else "linear")
    right.set_xlabel("step")
    right.grid(alpha=0.3)
    if keys:
        right.legend(fontsize=7)
    fig.suptitle(f"{pop.name}  ({pop.run_id})", fontsize=11)
    save(fig, path, fmt, root)
    return path

"""A population's cost and one-line summary (`hpctrain report` and `hpctrain list` of a PBT run):
GPU-hours per member, from its lineage's times (each launch from its start or restart to its
last record before the next one, or to now while it trains) x the job's shape, or from the
samplers' files in the member's directory where they recorded GPUs, as for a study's trials."""
from __future__ import annotations

import os
import time

import msgspec

from ...runs.records import Run, trial_dir
from . import lineage
from .lineage import Record
from .show import Population, bad, shown_number, population


class MemberCost(msgspec.Struct, kw_only=True):
    member: int
    state: str
    seconds: float
    gpus: int
    gpu_hours: float
    node_hours: float
    source: str  # samples (its usage files) | shape (its time x the job's shape)


class PopulationReport(msgspec.Struct, kw_only=True):
    run_id: str
    name: str
    nodes: int  # per member: the job's shape
    gpus_per_node: int
    members: list[MemberCost]
    gpu_hours: float
    node_hours: float
    copies: int


def seconds(recs: list[Record], now: float) -> float:
    """A member's training time: each launch from its start/restart record to its last record
    before the next restart (the wait for a requeue is not the member's), or to `now` while its
    newest launch trains."""
    total, begin, last = 0.0, None, None
    for r in recs:
        if r.event in ("start", "restart"):
            if begin is not None and last is not None:
                total += max(0.0, last - begin)
            begin, last = r.time, r.time
        elif begin is not None:
            last = r.time
    if begin is not None:
        ended = recs[-1].event in lineage.ENDED
        total += max(0.0, (last if ended else now) - begin)
    return total


def cost(run: Run, now: float | None = None) -> PopulationReport:
    from ...follow.report import directory_report
    from ..follow import gpus_per_node
    pop = population(run)
    try:
        recs = lineage.read_all(run.path, len(pop.members))
    except OSError as exc:  # changed since population() read it
        raise bad(f"lineage cannot be read: {exc}") from None
    nodes, per_node = run.record.nodes, gpus_per_node(run)
    gpus = nodes * per_node
    now = time.time() if now is None else now
    rows = []
    for row in pop.members:
        s = seconds(recs.get(row.member, []), now)
        c = MemberCost(member=row.member, state=row.state, seconds=s, gpus=gpus,
                       gpu_hours=gpus * s / 3600, node_hours=nodes * s / 3600, source="shape")
        d = trial_dir(run.path, row.member)
        if os.path.isdir(os.path.join(d, "usage")):
            sampled = directory_report(str(d), run.id, run.record.name, row.member)
            if sampled.gpu_hours_allocated > 0 and sampled.allocation_source != "none":
                c.gpu_hours, c.source = sampled.gpu_hours_allocated, "samples"
        rows.append(c)
    return PopulationReport(run_id=run.id, name=pop.name, nodes=nodes, gpus_per_node=per_node,
                            members=rows, gpu_hours=sum(c.gpu_hours for c in rows),
                            node_hours=sum(c.node_hours for c in rows), copies=pop.copies)


def format_report(r: PopulationReport) -> str:
    from ..show import duration, shown
    lines = [f"population {r.name} ({r.run_id}): each member {r.nodes} node(s) x "
             f"{r.gpus_per_node} GPU(s)",
             f"  GPU-hours {r.gpu_hours:.3f}, node-hours {r.node_hours:.3f} over "
             f"{len(r.members)} member(s), {r.copies} cop{'y' if r.copies == 1 else 'ies'}"]
    for c in r.members:
        lines.append(f"  member {c.member:>4} {c.state:<11} {duration(c.seconds):>8}  "
                     f"{c.gpu_hours:.3f} GPU-h [{c.source}], {c.node_hours:.3f} node-h")
    return shown("\n".join(lines))


def summary(pop: Population) -> str:
    """One phrase for `list` (what is left of 80 columns, the best first): the best so far,
    the members by state, the copies."""
    states: dict[str, int] = {}
    for m in pop.members:
        states[m.state] = states.get(m.state, 0) + 1
    best = (f"best {shown_number(pop.best.score)} member {pop.best.member}; "
            if pop.best is not None else "")
    return (f"{best}{len(pop.members)} members ("
            + ", ".join(f"{n} {s}" for s, n in sorted(states.items())) + f"), {pop.copies} copies")

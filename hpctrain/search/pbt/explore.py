"""PBT's rules, as pure functions: judge (a member at its boundary, against every other member
at the newest interval both have reached), exploit (a member in the bottom fraction picks a
member of the top fraction to copy) and explore (new values from the copied ones: multiply by a
factor, kept in the space, or resample from the space). Random draws come from the rng the
caller seeds, so a member's choices can be replayed."""
from __future__ import annotations

import math
import random

from ...job.pbt import bottom_count
from ..rules import ranked
from .lineage import HOLDING, Record

MAX_HOPS = 10_000  # copies followed back from one member (a lineage is finite; bounded all the same)


def sample(p, rng: random.Random):
    """A value from one parameter's space (SearchParam)."""
    kind = p.kind
    if kind == "categorical":
        return rng.choice(list(p.choices))
    lo, hi = float(p.low), float(p.high)
    x = math.exp(rng.uniform(math.log(lo), math.log(hi))) if p.log else rng.uniform(lo, hi)
    return int(round(min(max(x, lo), hi))) if kind == "int" else x


def initial(search, rng: random.Random) -> dict:
    return {key: sample(p, rng) for key, p in search.params.items()}


def perturb(value, p, factors, rng: random.Random):
    """value x one of the factors, kept within [low, high] (an int moves by at least 1)."""
    lo, hi = float(p.low), float(p.high)
    f = rng.choice(list(factors))
    x = float(value) * f
    if p.kind == "int":
        n = int(round(x))
        if n == value and f != 1:
            n = value + (1 if f > 1 else -1)
        return int(min(max(n, lo), hi))
    return min(max(x, lo), hi)


def rule(search, key: str) -> str:
    given = search.pbt.explore.get(key)
    if given:
        return given
    return "resample" if search.params[key].kind == "categorical" else "perturb"


def explore(search, params: dict, rng: random.Random) -> dict:
    """The values a member continues with after copying a member whose values were `params`."""
    return explored(search, params, rng)[0]


def explored(search, params: dict, rng: random.Random) -> tuple[dict, list[str]]:
    """explore's values, and the keys among them drawn afresh from the space. A key whose rule is
    perturb is resampled instead with probability pbt.resample_probability (as Ray Tune's PBT):
    multiplying by x0.8/x1.2 cannot cross decades within a training, a fresh draw can."""
    out, fresh = {}, []
    chance = search.pbt.resample_probability
    for key, p in search.params.items():
        value = params.get(key)
        if value is None or rule(search, key) == "resample" or isinstance(value, (bool, str)) \
                or (chance > 0 and rng.random() < chance):
            out[key] = sample(p, rng)
            fresh.append(key)
        else:
            out[key] = perturb(value, p, search.pbt.factors, rng)
    return out, fresh


def parent_for(me: int, latest: dict[int, float], parallel: int, fraction: float,
               direction: str, rng: random.Random, eligible=None) -> int | None:
    """The member `me` copies (decide's first half); None when it goes on as it is."""
    return decide(me, latest, parallel, fraction, direction, rng, eligible)[0]


def decide(me: int, latest: dict[int, float], parallel: int, fraction: float, direction: str,
           rng: random.Random, eligible=None, prefer=None) -> tuple[int | None, str]:
    """(the member `me` copies, "") when its score is in the bottom fraction of `latest`, else
    (None, why it goes on as it is). Fewer than two scores yet: nobody copies. `eligible`: the
    members it may copy, when not all may; `prefer`: among the top ones it may copy, those it
    takes when any is one of them (a member at or past its interval: no steps are lost)."""
    if me not in latest or len(latest) < 2:
        return None, "no other member has a comparable record yet"
    k = bottom_count(parallel, fraction)
    order = ranked(latest, direction)
    k = min(k, len(order) // 2)
    if k < 1 or me not in order[-k:]:
        return None, f"in the top {len(order) - k} of {len(order)}"
    top = [m for m in order[:k] if m != me and latest[m] != latest[me]]
    if not top:
        return None, f"in the bottom {k} of {len(order)}, but no member scores better"
    top = [m for m in top if eligible is None or m in eligible]
    if not top:
        return None, "no member ahead of it reached this interval"
    if prefer is not None:
        top = [m for m in top if m in prefer] or top
    return rng.choice(top), ""


def newest(recs: list[Record], upto: int | None = None) -> Record | None:
    """A member's newest record with a score and a checkpoint (with `upto`: at an interval no
    later than that one). An exploit record counts: the member holds that checkpoint and score
    now (a copy of it lies in its own workspace)."""
    for rec in reversed(recs):
        if upto is not None and rec.interval > upto:
            continue
        if rec.score is not None and rec.checkpoint and rec.event in HOLDING:
            return rec
    return None


def trained_values(records: dict[int, list[Record]], rec: Record) -> dict:
    """The values that trained the checkpoint `rec` names: its own, or for a copy not trained
    yet (an exploit record) those of the record it copied, as it was when copied. A member that
    copies one that has just copied explores from the values that earned the score, not from
    values no one has tried."""
    for _ in range(MAX_HOPS):
        if rec.event != "exploit" or rec.parent is None:
            break
        back = [r for r in records.get(rec.parent, []) if r.time <= rec.time
                and r.interval == rec.parent_interval and r.score is not None
                and r.event in HOLDING]
        if not back:
            break
        rec = back[-1]
    return dict(rec.params)


def held_score(records: dict[int, list[Record]], member: int, interval: int) -> float | None:
    """The score of the training `member` holds now, at its newest record no later than
    `interval`: its own records back to its newest copy, and before the copied interval the
    records of the member it copied, as they were when it copied (its own records from before
    a copy belong to a training it left). None when that training has no such record."""
    m, until = member, None
    for _ in range(MAX_HOPS):
        for rec in reversed(records.get(m, [])):
            if (until is not None and rec.time > until) or rec.score is None \
                    or rec.event not in HOLDING:
                continue
            if rec.event == "exploit" and rec.interval > interval:
                if rec.parent is None:
                    return None
                m, until = rec.parent, rec.time
                break
            if rec.interval <= interval:
                return rec.score
        else:
            return None
    return None


def margins(me: int, records: dict[int, list[Record]], interval: int,
            direction: str) -> dict[int, float]:
    """How far each member is ahead of `me` (at its record of `interval`): each other member's
    newest record, compared with what `me` held at that member's interval, or at `interval`
    when that member is further along (what it held there then). Comparing at the same interval
    keeps a score that grows with training (a return summed so far) from ranking a member that
    lost time restarting below those merely further along, and a member ahead of all is judged
    at each of its boundaries against everyone's newest records (as asynchronous PBT does).
    Positive: ahead of `me`, whatever the direction; `me` is 0. A member with no comparable
    record is left out, and so is one whose newest record is a copy it has not trained yet: it
    holds an older record of the member it copied, which is compared through its own newest
    (judged against that older state, a member far along would go back for what its parent
    has since left behind)."""
    sign = 1.0 if direction == "maximize" else -1.0
    out: dict[int, float] = {}
    if held_score(records, me, interval) is None:
        return out
    out[me] = 0.0
    for m, recs in records.items():
        rec = newest(recs) if m != me else None
        if rec is None or rec.event == "exploit":
            continue
        at = min(interval, rec.interval)
        theirs, mine = held_score(records, m, at), held_score(records, me, at)
        if theirs is not None and mine is not None:
            out[m] = sign * (theirs - mine)
    return out

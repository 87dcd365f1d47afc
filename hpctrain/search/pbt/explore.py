"""PBT's two rules, as pure functions: exploit (a member in the bottom fraction picks a member of
the top fraction to copy) and explore (new values from the copied ones: multiply by a factor,
kept in the space, or resample from the space). Random draws come from the rng the caller
seeds, so a member's choices can be replayed."""
from __future__ import annotations

import math
import random

from ...job.pbt import bottom_count


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
    out = {}
    for key, p in search.params.items():
        value = params.get(key)
        if value is None or rule(search, key) == "resample" or isinstance(value, (bool, str)):
            out[key] = sample(p, rng)
        else:
            out[key] = perturb(value, p, search.pbt.factors, rng)
    return out


def ranked(latest: dict[int, float], direction: str) -> list[int]:
    """Members, best first, by their newest score (ties: the lower index first)."""
    sign = -1 if direction == "maximize" else 1
    return sorted(latest, key=lambda m: (sign * latest[m], m))


def parent_for(me: int, latest: dict[int, float], parallel: int, fraction: float,
               direction: str, rng: random.Random, eligible=None) -> int | None:
    """The member `me` copies, when its newest score is in the bottom fraction of the members'
    newest scores (each member's own, whatever interval it is at: nobody waits); None when it
    goes on as it is. Fewer than two scores yet: nobody copies. `eligible`: the members it may
    copy (those not behind it), when not all may."""
    if me not in latest or len(latest) < 2:
        return None
    k = bottom_count(parallel, fraction)
    order = ranked(latest, direction)
    k = min(k, len(order) // 2)
    if k < 1 or me not in order[-k:]:
        return None
    top = [m for m in order[:k] if m != me and latest[m] != latest[me]
           and (eligible is None or m in eligible)]
    if not top:
        return None  # no better member to copy
    return rng.choice(top)

"""Slurm's reservations, and a job's collision with an upcoming maintenance.

A job whose time limit runs into a maintenance reservation (Flags=MAINT) on the nodes it can use
does not start before the maintenance: Slurm keeps it pending ("ReqNodeNotAvail, Reserved for
maintenance") until the reservation ends, and a job of a reservation that recurs with gaps
shorter than its time limit never starts at all. `collision()` says so at submit, with the
longest `resources.time` that fits, from `scontrol -o show reservation` and the partition's nodes
(`scontrol -o show partition`). Everything read is untrusted text (rank/printable.py clean).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from .. import commands
from ..ssh import hostlist
from ...rank.printable import clean
from .records import parse_scontrol_line

def when(epoch: float | None) -> str | None:
    """An epoch time as local ISO time (minutes), or None for Slurm's "not known"."""
    if not epoch or epoch <= 0:
        return None
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(epoch))


# A recurring reservation's period, by its flag.
_PERIOD = {"HOURLY": 3600, "DAILY": 86400, "WEEKLY": 7 * 86400}
_NODES_LIMIT = 100_000  # a node list naming more is not expanded (then: every node counts)


@dataclass
class Reservation:
    name: str
    start: float | None
    end: float | None
    nodes_text: str
    nodes: set[str] | None  # None: all nodes, or a list too large to expand
    flags: set[str] = field(default_factory=set)
    state: str = ""

    @property
    def maint(self) -> bool:
        return "MAINT" in self.flags

    @property
    def period(self) -> int | None:
        return next((p for f, p in _PERIOD.items() if f in self.flags), None)

    def shown(self) -> dict:
        return {"name": self.name, "start": when(self.start), "end": when(self.end),
                "nodes": self.nodes_text, "maint": self.maint, "flags": sorted(self.flags),
                "state": self.state}


def _time(text: str | None) -> float | None:
    if not text or not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", text):
        return None
    try:
        epoch = time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None
    return epoch if epoch > 0 else None  # before 1970: no reservation's time, an odd record


def _nodes(text: str) -> set[str] | None:
    if not text or text in ("ALL", "(null)"):
        return None
    try:
        return set(hostlist.expand(text, limit=_NODES_LIMIT))
    except ValueError:
        return None


def parse(text: str) -> list[Reservation]:
    """`scontrol -o show reservation` -> reservations ("No reservations in the system": [])."""
    out = []
    for line in text.splitlines():
        if not line.startswith("ReservationName="):
            continue
        f = parse_scontrol_line(line)
        nodes_text = clean(f.get("Nodes"), 120) or ""
        out.append(Reservation(
            name=clean(f.get("ReservationName"), 64) or "?", start=_time(f.get("StartTime")),
            end=_time(f.get("EndTime")), nodes_text=nodes_text, nodes=_nodes(f.get("Nodes", "")),
            flags={w for w in (f.get("Flags") or "").split(",") if re.fullmatch(r"[A-Z_]{1,32}", w)},
            state=clean(f.get("State"), 16) or ""))
    return out


def holding_text(shown: list[dict]) -> tuple[str, str]:
    """(what holds a pending job, what helps) for the reservations on its nodes (each as
    Reservation.shown() gives it). A time Slurm did not give, or gave oddly, is said to be
    unknown: the sentence never reads "before None"."""
    def window(r: dict) -> str:
        return f"{r.get('start') or 'an unknown start'} to {r.get('end') or 'an unknown end'}"
    shown_text = "; ".join(f"{r['name']} ({'maintenance, ' if r.get('maint') else ''}"
                           f"{window(r)} on {r.get('nodes') or 'all nodes'})" for r in shown[:3])
    first = shown[0]
    fix = f"it starts after {first['name']} ends"
    fix += (f"; a resources.time that ends before {first['start']} could start now"
            if first.get("start") else
            f"; `scontrol show reservation {first['name']}` shows its times")
    return f"a reservation holds the nodes: {shown_text}", fix


def partition_nodes(partition: str | None) -> tuple[str | None, set[str] | None]:
    """(the partition's name, its nodes) for a job's partition (None: the default one); the
    nodes are None when they cannot be told (then every reservation counts)."""
    text = commands.run(["scontrol", "-o", "show", "partition"])
    wanted = [p for p in (partition or "").split(",") if p]
    found: set[str] = set()
    name = None
    for line in text.splitlines():
        f = parse_scontrol_line(line)
        pname = f.get("PartitionName")
        if (pname in wanted) or (not wanted and f.get("Default") == "YES"):
            name = name or pname
            nodes = _nodes(f.get("Nodes", ""))
            if nodes is None:
                return pname, None
            found |= nodes
    return name, (found or None)


def _overlaps(res: Reservation, nodes: set[str] | None) -> bool:
    return res.nodes is None or nodes is None or bool(res.nodes & nodes)


def holding(reservations: list[Reservation], partition: str | None,
            named: str | None = None) -> list[Reservation]:
    """The reservations on the nodes a pending job can use (its partition's) that are active
    or upcoming, maintenance first; or the one it asked for by name."""
    if named:
        mine = [r for r in reservations if r.name == named]
        if mine:
            return mine
    _, nodes = partition_nodes(partition)
    now = time.time()
    found = [r for r in reservations if _overlaps(r, nodes) and (r.end is None or r.end > now)]
    return sorted(found, key=lambda r: (not r.maint, r.start or 0))


def _fmt(seconds: int) -> str:
    """Seconds as a Slurm time limit that fits in them (rounded down to a minute)."""
    m = max(0, int(seconds) // 60)
    d, m = divmod(m, 1440)
    h, m = divmod(m, 60)
    return f"{d}-{h:02d}:{m:02d}:00" if d else f"{h:02d}:{m:02d}:00"


@dataclass
class Collision:
    reservation: Reservation
    fits: int  # the longest time limit (seconds) that ends before it, from now
    never: bool  # the job can never start: each gap between its occurrences is too short
    text: str


def collision(reservations: list[Reservation], nodes_usable: set[str] | None, nodes_needed: int,
              limit_s: int, now: float | None = None) -> Collision | None:
    """The first maintenance reservation a job of `nodes_needed` nodes and `limit_s` seconds,
    starting now on `nodes_usable` (None: unknown, all), would run into; None when none.

    A job runs into one when it would still run at the reservation's start, and too few of its
    nodes lie outside it. It can never start when the reservation recurs and the gap between
    two occurrences is shorter than the time limit, or when it never ends."""
    now = time.time() if now is None else now
    for res in sorted((r for r in reservations if r.maint), key=lambda r: r.start or 0):
        if res.start is None or not _overlaps(res, nodes_usable):
            continue
        if nodes_usable is not None and res.nodes is not None and \
                len(nodes_usable - res.nodes) >= nodes_needed:
            continue  # enough of its nodes stay free of it
        duration = (res.end - res.start) if res.end is not None else None
        period = res.period
        gap = period - duration if period and duration is not None else None
        active = res.start <= now and (res.end is None or res.end > now)
        fits = max(0, int(res.start - now)) if not active else 0
        if not active and now + limit_s <= res.start:
            continue
        never = res.end is None or (gap is not None and limit_s > gap)
        window = f"{when(res.start)} to {when(res.end) or 'no end'}"
        recur = f", every {period // 3600} h" if period else ""
        if never:
            text = (f"the job can never start: maintenance reservation {res.name} ({window}"
                    f"{recur}) holds {res.nodes_text or 'all nodes'}, and "
                    + (f"the gap between its occurrences ({_fmt(gap)}) is shorter than "
                       f"resources.time ({_fmt(limit_s)})" if gap is not None else "it has no end"))
        elif active:
            text = (f"maintenance reservation {res.name} ({window}{recur}) holds "
                    f"{res.nodes_text or 'all nodes'} now: the job waits until it ends")
        else:
            text = (f"resources.time ({_fmt(limit_s)}) runs into maintenance reservation "
                    f"{res.name} ({window}{recur}) on {res.nodes_text or 'all nodes'}: the job "
                    f"will not start before it ends; resources.time {_fmt(fits)} or less fits "
                    "before it")
        return Collision(res, fits, never, text)
    return None

"""Time to first step, per attempt: where the minutes between an attempt's start and its first
training step went, from the marks the job wrote (rank/phases.py).

The phases follow one another on the critical path, each from the previous mark present:

    setup       the batch shell's start -> its set-up done (modules, setup lines, container)
    imports     -> the slowest node's launch process has imported torch's launcher
    health      -> the slowest node's check is over (health gate + node barrier, then the
                   network floor where the job sets one), where it took longer than the import
                   it runs beside; the gate's own seconds are health_gate_s, the floor's
                   network_floor_s
    rendezvous  -> rank 0 started (torchrun's rendezvous over, the workers spawned)
    library     -> rank 0's first progress report (the library's first iteration done)

A phase whose mark is missing (a launch without the node check, an older run) is counted in the
next one. The marks are a run directory's, untrusted: read bounded, regular files only, and only
finite epoch seconds are taken.
"""
from __future__ import annotations

import datetime
import math
import os
import re

from ..rank.records import read_json
from ..rank.spares import read_replacements

PHASES = ("setup", "imports", "health", "rendezvous", "library")
MAX_ATTEMPTS = 1000
MAX_NODES = 4096
_DIR = re.compile(r"^([A-Za-z0-9._-]{1,64})-([0-9]{1,6})$")
_NODE = re.compile(r"^node-[A-Za-z0-9._-]{1,200}\.json$")


def _time(value) -> float | None:
    """Epoch seconds from a mark: a number, or the shell's text (a ',' where the locale says)."""
    if isinstance(value, str):
        try:
            value = float(value.replace(",", ".", 1)[:32])
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and 1e9 < value < 1e11 else None


def _seconds(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and 0 <= value < 1e7 else None


def _read(path: str) -> dict:
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _submitted(text: str | None) -> float | None:
    if not text:
        return None
    try:
        when = datetime.datetime.fromisoformat(str(text)[:40])
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


def attempt(directory: str, job: str, number: int) -> dict:
    """One attempt's marks and phases."""
    shell = _read(os.path.join(directory, "shell.json"))
    rank0 = _read(os.path.join(directory, "rank-0.json"))
    try:
        names = sorted(n for n in os.listdir(directory) if _NODE.match(n))[:MAX_NODES]
    except OSError:
        names = []
    nodes = [_read(os.path.join(directory, n)) for n in names]
    imported = [t for t in (_time(n.get("imported")) for n in nodes) if t is not None]
    checked = [t for t in (_time(n.get("checked")) for n in nodes) if t is not None]
    gate = [s for s in (_seconds(n.get("health_s")) for n in nodes) if s is not None]
    floor = [s for s in (_seconds(n.get("floor_s")) for n in nodes) if s is not None]
    started = _time(shell.get("started"))
    points = [("setup", _time(shell.get("setup"))),
              ("imports", max(imported) if imported else None),
              ("health", max(imported + checked) if checked else None),
              ("rendezvous", _time(rank0.get("rank_start"))),
              ("library", _time(rank0.get("first_step")))]
    phases: dict[str, float | None] = dict.fromkeys(PHASES)
    last = started
    for name, when in points:
        if when is None or last is None or when < last:
            continue
        phases[name] = round(when - last, 3)
        last = when
    first = _time(rank0.get("first_step"))
    return {"job_id": job, "attempt": number, "started": started, "first_step": first,
            "first_step_s": round(first - started, 3) if first and started and first >= started
            else None, "phases": phases, "health_gate_s": max(gate) if gate else None,
            "network_floor_s": max(floor) if floor else None, "nodes": len(nodes)}


def attempts(run_dir: str, submitted: str | None = None) -> list[dict]:
    """Every attempt of the run that left marks, in the order they started; the first one's
    time in the queue when the run's submit time is known."""
    base = os.path.join(run_dir, "status", "phases")
    try:
        entries = [(m.group(1), int(m.group(2)), e) for e in os.listdir(base)
                   if (m := _DIR.match(e))]
    except OSError:
        return []
    entries = sorted(entries, key=lambda t: (t[1], t[0]))[:MAX_ATTEMPTS]
    out = [attempt(os.path.join(base, e), job, n) for job, n, e in entries
           if os.path.isdir(os.path.join(base, e)) and not os.path.islink(os.path.join(base, e))]
    out.sort(key=lambda a: (a["started"] is None, a["started"] or 0.0))
    sent = _submitted(submitted)
    if out and sent is not None and out[0]["started"] is not None and out[0]["started"] >= sent:
        out[0]["queued_s"] = round(out[0]["started"] - sent, 3)
    return out


def _s(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def line(attempts_: list[dict]) -> str | None:
    """'first step 41 s after start: setup 6, imports 9, health 2, rendezvous 2, library 22'
    for the newest attempt that has marks; None when there is none."""
    if not attempts_:
        return None
    a = attempts_[-1]
    parts = ", ".join(f"{name} {_s(v)}" for name, v in a["phases"].items() if v is not None)
    where = f" (attempt {len(attempts_)})" if len(attempts_) > 1 else ""
    if a["first_step_s"] is None:
        return f"no first step yet{where}" + (f": {parts}" if parts else "")
    return f"first step {_s(a['first_step_s'])} s after start{where}" + (
        f": {parts}" if parts else "")


def replacements(run_dir: str, attempts: list[dict]) -> list[dict]:
    """Each in-allocation replacement, with the seconds from the failure to the first progress
    report of the attempt it started (None while that attempt has not reported one)."""
    first = {(a["job_id"], a["attempt"]): a["first_step"] for a in attempts}
    out = []
    for r in read_replacements(run_dir):
        step = first.get((r["job_id"], r["attempt"]))
        back = round(step - r["failed_at"], 1) if step and step >= r["failed_at"] else None
        out.append({"job_id": r["job_id"], "attempt": r["attempt"], "out": r["out"],
                    "in": r["in"], "why": r["why"], "back_s": back})
    return out

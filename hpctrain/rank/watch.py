"""The hang watcher: a job in which no rank has progressed for launcher.hang_timeout is ended.

Run by the batch shell beside the launch (`RUN_DIR/rank watch RUN_DIR TIMEOUT`, on the batch
host, reading the run directory every rank writes to). A rank shows progress by

- its progress report (status/progress-R.json: the library hooks write one at every iteration
  boundary, a plain program calls hpctrain_progress.report(step) itself), or,
- for a rank that reports none, its output (logs/rank-R.log growing).

When the newest sign of life of every rank is older than the timeout, the watcher names the
stuck ranks — those furthest behind (in a lockstep training the rank that blocks first stops
one iteration before the others, which then wait for it in their next collective), or every
rank when none is behind — with their nodes; where PyTorch's flight recorder is on, it asks
every rank for its dump first (flight.py, at most flight.WAIT s), which culprit.py compares at
the end. It writes status/failure.json (reason "hang") and exits 3. The batch shell then ends the ranks (`RUN_DIR/rank kill-ranks RUN_DIR` on every node:
SIGQUIT first, which the bootstrap turns into a stack dump of every thread in the rank's log,
then SIGKILL): torchrun restarts them from the newest checkpoint while launcher.max_restarts
allows, and after that the job ends and is requeued while preemption.max_requeues allows
(recovery.py; the stuck ranks' nodes are left out when they are not all of the job's).
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field

from .records import (JobFailure, RankIdentity, now, read_identities, read_progress,
                      write_job_failure)

HANG_STATUS = 3


@dataclass
class Hang:
    message: str
    ranks: list = field(default_factory=list)  # [{rank, node, step, idle_s}]
    nodes: list = field(default_factory=list)  # blamed: the stuck ranks' nodes, if not all nodes


def _log_mtime(run_dir: str, rank: int) -> float | None:
    try:
        return os.stat(os.path.join(run_dir, "logs", f"rank-{rank}.log")).st_mtime
    except OSError:
        return None


def _log_size(run_dir: str, rank: int) -> int:
    try:
        return os.stat(os.path.join(run_dir, "logs", f"rank-{rank}.log")).st_size
    except OSError:
        return 0


def scan(run_dir: str, since: float, now_ts: float, timeout: float) -> Hang | None:
    """A Hang when no rank has shown progress for `timeout` s (counting from `since`, the
    launch), else None."""
    identities = {i.rank: i for i in read_identities(run_dir)}
    reports = {p.rank: p for p in read_progress(run_dir) if p.time >= since}
    ranks = sorted(set(identities) | set(reports))
    seen: dict[int, float] = {}
    for r in ranks:
        if r in reports:
            seen[r] = reports[r].time
        else:
            mtime = _log_mtime(run_dir, r)
            started = identities[r].started if r in identities else 0.0
            seen[r] = max(since, mtime or 0.0) if started >= since else since
    newest = max(seen.values(), default=since)
    if now_ts - newest < timeout:
        return None
    if not ranks:
        return Hang(f"no rank started within {timeout:g} s (launcher.hang_timeout)")
    steps = {r: reports[r].step for r in ranks if r in reports}
    stuck = ranks
    if steps and len(steps) == len(ranks) and len(set(steps.values())) > 1:
        low = min(steps.values())
        stuck = [r for r in ranks if steps[r] == low]

    def node(r: int) -> str:
        return identities[r].node if r in identities else "?"

    def where(r: int) -> str:
        at = f" at {'iteration ' + str(steps[r]) if r in steps else 'its start (no progress report)'}"
        return f"rank {r} on {node(r)}{at}"
    # Where each log ended: the stack dumped when the rank is ended follows (culprit.py).
    detail = [{"rank": r, "node": node(r), "step": steps.get(r), "idle_s": round(now_ts - seen[r], 1),
               "log_offset": _log_size(run_dir, r)} for r in stuck]
    if stuck == ranks:
        head = (f"no rank has progressed for {timeout:g} s (launcher.hang_timeout): "
                + "; ".join(where(r) for r in stuck))
    else:
        others = [r for r in ranks if r not in stuck]
        head = (f"no rank has progressed for {timeout:g} s (launcher.hang_timeout): stuck "
                + "; ".join(where(r) for r in stuck)
                + f"; the other {len(others)} rank(s) wait for it at iteration "
                + ", ".join(sorted({str(steps[r]) for r in others})))
    all_nodes = {node(r) for r in ranks} - {"?"}
    blamed = sorted({node(r) for r in stuck} - {"?"})
    nodes = blamed if set(blamed) != all_nodes else []
    return Hang(head + "; every rank's stack is in its log (logs/rank-R.log)", detail, nodes)


def watch(run_dir: str, timeout: float, poll: float | None = None) -> int:
    """Watch until a hang is found (write status/failure.json, return 3); the shell stops it
    with SIGTERM when the launch ends first."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    since = time.time()
    poll = poll or min(5.0, max(0.5, timeout / 10))
    while True:
        time.sleep(poll)
        hang = scan(run_dir, since, time.time(), timeout)
        if hang is None:
            continue
        from . import flight
        if flight.enabled():
            token = flight.ask(run_dir, sorted(i.rank for i in read_identities(run_dir)))
            for r in hang.ranks:
                r["flight_recorder"] = token
        write_job_failure(run_dir, JobFailure(
            reason="hang", exit_status=HANG_STATUS, message=hang.message, ranks=hang.ranks,
            job_id=os.environ.get("HPCTRAIN_JOB_ID"),
            job_restart=int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0),
            node=os.environ.get("SLURMD_NODENAME") or socket.gethostname(), time=now(),
            nodes=hang.nodes))
        print(hang.message, flush=True)
        return HANG_STATUS


def _is_rank(pid: int, run_dir: str) -> bool:
    """A bootstrapped rank of this run (not a reused pid)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read().split(b"\0")
    except OSError:
        return False
    return b"bootstrap.json" in cmdline and f"HPCTRAIN_RUN_DIR={run_dir}".encode() in environ


def node_ranks(run_dir: str) -> tuple[str, list[RankIdentity]]:
    """(this node's name, the run's ranks that run here now): their records checked against
    /proc, so that a reused pid is never signalled."""
    me = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    return me, [i for i in read_identities(run_dir)
                if i.node == me and i.pid and _is_rank(i.pid, run_dir)]


def _dumped(run_dir: str, rank: int, offset: int) -> bool:
    """A stack dump has reached the rank's log past `offset`."""
    from .culprit import read_stack
    return read_stack(run_dir, rank, offset) is not None


def kill_ranks(run_dir: str, grace: float = 5.0) -> int:
    """End this node's ranks of the run: SIGQUIT (a stack dump in each rank's log), then,
    once every dump is in its log (or after `grace` s), SIGKILL. Run on every node by the batch
    shell after a hang. The wait is what makes the stacks there when culprit.py reads them: the
    dump goes through the rank's output pipe and its tee process, which a loaded node may run
    late, and which the end of the launch step may kill with its unwritten lines."""
    me, ranks = node_ranks(run_dir)
    pids = [i.pid for i in ranks]
    offsets = {i.rank: _log_size(run_dir, i.rank) for i in ranks}
    for pid in pids:
        try:
            os.kill(pid, signal.SIGQUIT)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    waiting = [i for i in ranks]
    while waiting and time.monotonic() < deadline:
        time.sleep(0.1)
        waiting = [i for i in waiting
                   if _is_rank(i.pid, run_dir) and not _dumped(run_dir, i.rank, offsets[i.rank])]
    killed = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    print(f"hpctrain: hang: {me}: ended {killed} rank process(es) "
          f"({', '.join(map(str, pids)) or 'none found'})", flush=True)
    return 0

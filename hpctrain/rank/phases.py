"""Where an attempt's minutes before its first step go (issue 29): marks, in epoch seconds,
written where each moment happens, read back by follow/startup.py.

    status/phases/JOB-ATTEMPT/shell.json    {"started", "setup"}: the batch shell's start, the
                                            end of its set-up (modules, setup lines, container);
                                            written by the shell itself (parts/launch.sh.j2)
    status/phases/JOB-ATTEMPT/node-N.json   {"launch", "imported", "checked", "health_s",
                                            "floor_s"}: each node's launch process: its start,
                                            torch's launcher imported, the node check (health
                                            gate + barrier + network floor) over, the health
                                            gate's and the network floor's own seconds
    status/phases/JOB-ATTEMPT/rank-0.json   {"rank_start", "first_step"}: rank 0's bootstrap
                                            began (torchrun's rendezvous is over), its first
                                            progress report (the library's first iteration)

JOB is HPCTRAIN_JOB_ID, ATTEMPT is HPCTRAIN_ATTEMPT (the Slurm root's: SLURM_RESTART_COUNT; 0
without one): one folder an attempt.
Each file has one writer; a mark is a report, never a reason for the launch to fail.
"""
from __future__ import annotations

import os
import re

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def attempt_dir(run_dir: str) -> str:
    env = os.environ
    job = _SAFE.sub("_", env.get("HPCTRAIN_JOB_ID") or env.get("SLURM_JOB_ID") or "0")[:64]
    attempt = env.get("HPCTRAIN_ATTEMPT") or env.get("SLURM_RESTART_COUNT") or "0"
    return os.path.join(run_dir, "status", "phases",
                        f"{job}-{attempt if attempt.isdigit() else '0'}")


def node_file(node: str) -> str:
    return f"node-{_SAFE.sub('_', node)[:200]}.json"


def mark(who: str, marks: dict) -> None:
    """Write this writer's marks of the attempt (who: node-N.json's or rank-0.json's name),
    over what it wrote before in this attempt."""
    run_dir = os.environ.get("HPCTRAIN_RUN_DIR")
    if not run_dir:
        return
    from .records import read_json, write_json
    path = os.path.join(attempt_dir(run_dir), who)
    try:
        try:
            old = read_json(path)
        except (OSError, ValueError):
            old = {}
        write_json(path, {**(old if isinstance(old, dict) else {}), **marks}, indent=None,
                   root=run_dir)
    except OSError:
        pass

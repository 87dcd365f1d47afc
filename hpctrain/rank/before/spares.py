"""Spare nodes (resources.spare_nodes): which nodes of the allocation an attempt runs on, and a
blamed node swapped for a spare inside the same allocation (issue 43).

The job holds nodes + K nodes (sbatch --nodes, --no-kill; on an ssh site, the K hosts after the
job's: templates/ssh/spares.sh.j2); each attempt launches on exactly
`nodes` of them, named (srun --nodelist), so that a relaunch can never land on a bad node again.
The batch shell asks, before each attempt:

    RUN_DIR/rank spares pick RUN_DIR NNODES ALLOCATION     -> "NODE,NODE,..." (the first: the head)

and after a failure that rank/end/recovery.py decided blames nodes (they are in status/excluded.json
by then):

    RUN_DIR/rank spares replace RUN_DIR NNODES ALLOCATION ROUND MAX_ROUNDS WHY
        -> exit 0: the next attempt's nodes are chosen and the replacement recorded
        -> exit 1: no healthy spare is left (or the allocation's attempts are spent): a requeue

status/spares.json holds this allocation's chosen nodes ({"job_id", "chosen"}); each replacement
is one line of status/replacements.jsonl: the attempt it starts, the nodes out and in, why, and
when the failure was handled (follow/status.py adds the seconds to the next first step).
A node once blamed is never chosen again (status/excluded.json, read here).
"""
from __future__ import annotations

import json
import os
import re
import time

from ..records import open_append, read_excluded, read_json, read_lines, write_json

NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
MAX_NODES = 100_064  # resources.nodes + spare_nodes at most
MAX_REPLACEMENTS = 1000  # lines of status/replacements.jsonl read back


def choose(allocation: list[str], excluded: set[str] | list[str], n: int,
           previous: list[str] | tuple = ()) -> list[str] | None:
    """The `n` nodes of the next attempt, or None when fewer than `n` healthy ones are left.

    A node of the previous attempt that is still healthy keeps its place (a blamed one's place
    goes to the first unused spare, in the allocation's order), so that the head stays where it
    was unless the head itself is blamed. The head is the first node of the list."""
    bad = set(excluded)
    healthy = [x for x in dict.fromkeys(allocation) if x not in bad]
    kept = [x for x in previous if x in healthy]
    spares = iter(x for x in healthy if x not in kept)
    chosen: list[str] = []
    for x in previous:
        if x in kept:
            chosen.append(x)
        elif (spare := next(spares, None)) is not None:
            chosen.append(spare)
    chosen += list(spares)
    chosen = list(dict.fromkeys(chosen))[:n]
    return chosen if len(chosen) == n else None


def _paths(run_dir: str) -> tuple[str, str]:
    status = os.path.join(run_dir, "status")
    return os.path.join(status, "spares.json"), os.path.join(status, "replacements.jsonl")


def chosen_nodes(run_dir: str, job_id: str | None = None) -> list[str]:
    """The nodes of the run's latest attempt as recorded (status/spares.json: untrusted, each
    name checked); with `job_id`, only that allocation's ([] for another's)."""
    try:
        data = read_json(_paths(run_dir)[0])
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict) or (job_id is not None and data.get("job_id") != job_id):
        return []
    chosen = data.get("chosen")
    if not isinstance(chosen, list):
        return []
    return [x for x in chosen[:MAX_NODES] if isinstance(x, str) and NODE.fullmatch(x)]


def _allocation(text: str) -> list[str]:
    return [x for x in text.split(",")[:MAX_NODES] if NODE.fullmatch(x)]


def _job_id() -> str:
    """Slurm's job id; on an ssh site the batch shell's (HPCTRAIN_JOB_ID, which spare attempts
    keep: templates/ssh/job.sh.j2)."""
    return os.environ.get("SLURM_JOB_ID") or os.environ.get("HPCTRAIN_JOB_ID", "")


def pick(run_dir: str, n: int, allocation: str) -> int:
    """Print this attempt's nodes, comma-separated (the head first); record them."""
    job = _job_id()
    excluded = [e.node for e in read_excluded(run_dir)]
    chosen = choose(_allocation(allocation), excluded, n, chosen_nodes(run_dir, job))
    if chosen is None:
        print(f"hpctrain spares: the allocation ({allocation}) has fewer than {n} node(s) that no "
              f"failure blamed (left out: {', '.join(excluded) or 'none'})", flush=True)
        return 1
    write_json(_paths(run_dir)[0], {"job_id": job, "chosen": chosen}, root=run_dir)
    print(",".join(chosen), flush=True)
    return 0


def attempt_id(round_: int, environ=None) -> int:
    """HPCTRAIN_ATTEMPT of an allocation's attempt ROUND (0: its first): 100 per requeue
    (SLURM_RESTART_COUNT), one per replacement inside it (spare_nodes <= 64)."""
    restarts = (environ if environ is not None else os.environ).get("SLURM_RESTART_COUNT", "")
    return (int(restarts) if restarts.isdigit() else 0) * 100 + round_


def replace(run_dir: str, n: int, allocation: str, round_: int, max_rounds: int,
            why: str) -> int:
    """After a failure that blamed nodes: choose the next attempt's nodes with spares in the
    blamed ones' places and record the replacement (exit 0), or say why none can be (exit 1)."""
    job = _job_id()
    previous = chosen_nodes(run_dir, job)
    excluded = [e.node for e in read_excluded(run_dir)]
    out = [x for x in previous if x in excluded]
    if not out:
        print("no node of this attempt is blamed: nothing to replace", flush=True)
        return 1
    if round_ > max_rounds:
        print(f"this allocation has replaced nodes {round_ - 1} time(s), the most is "
              f"{max_rounds} (resources.spare_nodes)", flush=True)
        return 1
    chosen = choose(_allocation(allocation), excluded, n, previous)
    if chosen is None:
        print(f"no healthy spare is left in the allocation to replace {', '.join(out)}",
              flush=True)
        return 1
    came = [x for x in chosen if x not in previous]
    record = {"job_id": job, "attempt": attempt_id(round_), "out": out, "in": came, "why": why[:500],
              "failed_at": round(time.time(), 3), "nodes": chosen}
    spares_path, log_path = _paths(run_dir)
    write_json(spares_path, {"job_id": job, "chosen": chosen}, root=run_dir)
    with open_append(log_path, root=run_dir, mode="a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
    print(f"{','.join(out)} {','.join(came)}", flush=True)
    return 0


def read_replacements(run_dir: str) -> list[dict]:
    """status/replacements.jsonl, each line checked (the run directory is untrusted)."""
    try:
        lines = read_lines(_paths(run_dir)[1])
    except (OSError, ValueError):
        return []
    out = []
    for raw in lines[-MAX_REPLACEMENTS:]:
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        nodes = {k: [x for x in rec.get(k) or [] if isinstance(x, str) and NODE.fullmatch(x)]
                 if isinstance(rec.get(k), list) else [] for k in ("out", "in")}
        attempt, failed = rec.get("attempt"), rec.get("failed_at")
        if not isinstance(attempt, int) or isinstance(attempt, bool) or not 0 <= attempt < 10**9:
            continue
        if not isinstance(failed, (int, float)) or isinstance(failed, bool) \
                or not 0 <= failed < 1e11:
            continue
        job = rec.get("job_id")
        out.append({"job_id": job if isinstance(job, str) and NODE.fullmatch(job) else "",
                    "attempt": attempt, "out": nodes["out"], "in": nodes["in"],
                    "why": str(rec.get("why", ""))[:500], "failed_at": float(failed)})
    return out


def main(args: list[str]) -> int:
    if len(args) == 4 and args[0] == "pick" and args[2].isdigit():
        return pick(args[1], int(args[2]), args[3])
    if len(args) == 7 and args[0] == "replace" and args[2].isdigit() and args[4].isdigit() \
            and args[5].isdigit():
        return replace(args[1], int(args[2]), args[3], int(args[4]), int(args[5]), args[6])
    print("usage: rank spares pick RUN_DIR NNODES ALLOCATION | replace RUN_DIR NNODES "
          "ALLOCATION ROUND MAX_ROUNDS WHY", flush=True)
    return 2

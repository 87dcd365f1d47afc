"""After a failure: which nodes it blames, whether a requeue can help, which nodes to leave out.

A job that failed because of a node — it failed its health gate (rank/health.py: a GPU missing,
an ECC error, a pending row remap, another process's memory, an odd driver), the preflight could
not reach the head from it, a hang whose stuck ranks sit on it (and not on every node), or a rank
that died of an error of the node rather than of the program (a GPU's ECC error, a lost device) —
would fail again where it ran. The batch shell (`RUN_DIR/rank recover RUN_DIR MAX`) asks decide() after such a failure; a
requeue then leaves the node out (Slurm's ExcNodeList, templates/slurm/requeue.sh.j2), and
`hpctrain submit --resume RUN` does the same (--exclude). Every node left out is recorded in
status/excluded.json with the failure that named it; no run ever leaves out more than
`preemption.max_excluded_nodes` of them (past that, the job is requeued without excluding more:
max_requeues still bounds the attempts). A program's own error (an exception in the training
code) requeues nothing: it would fail the same way.
"""
from __future__ import annotations

import os
import re

from .records import (ExcludedNode, JobFailure, RankFailure, first_failure, now,
                      read_excluded, read_job_failure, read_json, write_excluded)

# Errors that come from the node, not from the program: the GPU or its driver, or the node's
# interconnect as NCCL sees it. A Python exception of the training code matches none of them.
NODE_FAULTS = re.compile(
    r"uncorrectable ECC|ECC error|GPU (is lost|has fallen off the bus)|Xid\b|"
    r"no CUDA-capable device|CUDA driver (initialization failed|version is insufficient)|"
    r"all CUDA-capable devices are busy or unavailable|CUDA error: (unspecified launch failure|"
    r"system not yet initialized|an illegal instruction was encountered)|"
    r"NCCL error.*unhandled system error|cudaErrorDevicesUnavailable|cudaErrorECCUncorrectable",
    re.IGNORECASE)

# Failure reasons a requeue can cure (on other nodes, or simply again).
REQUEUE_REASONS = ("preflight", "hang", "ranks")


def is_node_fault(failure: RankFailure) -> bool:
    return bool(NODE_FAULTS.search(failure.error or ""))


DOWN_FILE = "nodes-down.txt"  # the batch shell's: the attempt's nodes Slurm reports down
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def down_nodes(run_dir: str) -> list[str]:
    """The nodes of the last attempt that Slurm reported down, drained or not responding when
    its launch failed (written with resources.spare_nodes: templates/slurm/requeue.sh.j2)."""
    from .records import read_lines
    try:
        lines = read_lines(os.path.join(run_dir, "status", DOWN_FILE), limit=1 << 16)
    except (OSError, ValueError):
        return []
    names = [x.decode(errors="replace").strip() for x in lines[:1000]]
    return list(dict.fromkeys(n for n in names if _NODE.fullmatch(n)))


def blamed_nodes(run_dir: str, reason: str, ranks: list[RankFailure]) -> list[str]:
    """The nodes a failure of `reason` blames (for status/failure.json)."""
    if reason == "preflight":
        # The nodes that failed their health gate (each says so itself), then those the head
        # blames (unreachable, or an odd driver).
        from .health import failed_nodes
        out = [v["node"] for v in failed_nodes(run_dir)]
        try:
            data = read_json(os.path.join(run_dir, "status", "preflight.json"))
        except (OSError, ValueError):
            return out
        nodes = data.get("nodes") if isinstance(data, dict) else None
        if isinstance(nodes, list):
            out += [n for n in nodes if isinstance(n, str) and n not in out]
        return out
    if reason == "ranks" and (down := down_nodes(run_dir)):
        return down  # Slurm took them away mid-attempt: every rank's error follows from that
    if reason == "ranks":
        first = first_failure(ranks)
        if first is not None and is_node_fault(first) and first.node not in ("", "?"):
            return [first.node]
    return []


def decide(run_dir: str, max_excluded: int, job_id: str | None = None,
           failure: JobFailure | None = None) -> tuple[bool, list[str], str]:
    """(requeue?, the run's whole exclusion list, why) after the failure in status/failure.json.

    Records newly excluded nodes in status/excluded.json. The list returned is every node the
    run excludes (Slurm replaces a job's ExcNodeList; the shell adds the job's own)."""
    failure = failure or read_job_failure(run_dir)
    excluded = read_excluded(run_dir)
    names = [e.node for e in excluded]
    if failure is None:
        return False, names, "no failure was recorded"
    if failure.reason not in REQUEUE_REASONS:
        return False, names, f"a {failure.reason} failure is not requeued"
    blamed = [n for n in failure.nodes if n not in names]
    if failure.reason == "ranks" and not failure.nodes:
        return False, names, ("the program failed (an error of its own, not of its node): a "
                              "requeue would fail the same way")
    why = f"{failure.reason} failure"
    if blamed:
        room = max(0, max_excluded - len(names))
        take, left = blamed[:room], blamed[room:]
        for node in take:
            excluded.append(ExcludedNode(node=node, reason=failure.reason,
                                         message=failure.message[:500], time=now(),
                                         job_id=job_id or failure.job_id))
        if take:
            write_excluded(run_dir, excluded)
            why += f", excluding {', '.join(take)}"
        if left:
            why += (f"; not excluding {', '.join(left)}: the run already excludes "
                    f"{len(excluded)} node(s), the limit is preemption.max_excluded_nodes="
                    f"{max_excluded}")
    return True, [e.node for e in excluded], why


def resume_exclusions(run_dir: str, max_excluded: int) -> tuple[list[str], str]:
    """For `submit --resume`: the nodes to leave out (the recorded ones, plus those the last
    failure blames, within the cap), and a line saying why."""
    failure = read_job_failure(run_dir)
    if failure is not None and failure.nodes:
        _, nodes, why = decide(run_dir, max_excluded, failure=failure)
        return nodes, why
    nodes = [e.node for e in read_excluded(run_dir)]
    return nodes, "excluded earlier" if nodes else ""

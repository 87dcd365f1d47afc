"""A hang's culprit (issue 29): of the ranks that stopped progressing, the one that is *not* in
the collective the others wait in.

When every rank hangs before its first progress report, the watcher (watch.py) can tell them
apart by nothing but their stacks: it ends them with SIGQUIT first, and the bootstrap's
faulthandler writes each rank's stack to its log (logs/rank-R.log). Here each stuck rank's main
thread (the one with a `<module>` frame: the program's, under runpy) is read from the end of its log
since the hang (the offset the watcher recorded): a rank whose innermost frame is in
torch.distributed waits in that collective (gloo's all_reduce, barrier, ...); the collective
most ranks wait in is the one the job is stuck in, and the ranks elsewhere — asleep in their own
code, loading data, blocked in another call — hold it. They are named with their node and their
frame, and their nodes (where not every node) are blamed, so the requeue leaves them out.

On GPUs NCCL's collectives return at once and the waiting ranks block later in the program's
own code: there the stacks cannot tell, and the record stays the watcher's.
"""
from __future__ import annotations

import os
import re
from collections import Counter

from .records import JobFailure

TAIL = 1 << 20  # bytes of a rank's log read back
# A thread's heading in a faulthandler dump (the bootstrap's, on SIGQUIT).
DUMP_HEAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):$")
_FRAME = re.compile(r'^  File "(.{1,4096})", line ([0-9]{1,9}) in (.{1,256})$')
_TORCH_DIST = "/torch/distributed/"


def main_stack(text: str) -> list[tuple[str, int, str]] | None:
    """The last dumped stack of the main thread in `text` (innermost frame first), or None."""
    stacks: list[list[tuple[str, int, str]]] = []
    current: list[tuple[str, int, str]] | None = None
    for line in text.splitlines():
        if DUMP_HEAD.match(line):
            current = []
            stacks.append(current)
            continue
        frame = _FRAME.match(line) if current is not None else None
        if frame:
            current.append((frame.group(1), int(frame.group(2)), frame.group(3)))
        else:
            current = None
    main = [s for s in stacks if any(f[2] == "<module>" for f in s)]
    return main[-1] if main else None


def where(stack: list[tuple[str, int, str]]) -> tuple[str | None, str]:
    """(the torch.distributed call it waits in, or None; its innermost frame as text)."""
    path, line, func = stack[0]
    op = func if _TORCH_DIST in path.replace("\\", "/") else None
    return op, f"{os.path.basename(path)}:{line} in {func}"


def read_stack(run_dir: str, rank: int, offset: int = 0) -> list[tuple[str, int, str]] | None:
    path = os.path.join(run_dir, "logs", f"rank-{rank}.log")
    try:
        data = _tail(path, offset)
    except OSError:
        return None
    return main_stack(data.decode("utf-8", "replace"))


def _tail(path: str, offset: int) -> bytes:
    """The log from `offset` (where it ended when the hang was found), at most TAIL bytes of
    its end; a regular file only."""
    import stat
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path}: not a regular file")
        os.lseek(fd, max(offset, info.st_size - TAIL, 0), os.SEEK_SET)
        os.set_blocking(fd, True)
        return os.read(fd, TAIL)
    finally:
        os.close(fd)


def verdict(stacks: dict[int, list]) -> tuple[list[int], str, list[int]] | None:
    """(the culprit ranks, the collective the others wait in, those waiting) or None when the
    stacks do not single any out."""
    sites = {r: where(s) for r, s in stacks.items() if s}
    ops = Counter(op for op, _ in sites.values() if op)
    if not ops or len(sites) < 2:
        return None
    (op, count), *rest = ops.most_common()
    if rest and rest[0][1] == count:
        return None
    waiting = sorted(r for r, (o, _) in sites.items() if o == op)
    culprits = sorted(r for r in sites if r not in waiting)
    return (culprits, op, waiting) if culprits else None


def refine(run_dir: str, failure: JobFailure) -> JobFailure:
    """The watcher's hang record with its culprit named and blamed, when the stacks tell."""
    ranks = [r for r in failure.ranks if isinstance(r, dict) and isinstance(r.get("rank"), int)]
    stacks = {}
    for r in ranks:
        offset = r.get("log_offset")
        stacks[r["rank"]] = read_stack(run_dir, r["rank"],
                                       offset if isinstance(offset, int) and offset > 0 else 0)
    found = verdict(stacks)
    if found is None:
        return failure
    culprits, op, waiting = found
    node = {r["rank"]: str(r.get("node") or "?") for r in ranks}
    for r in ranks:
        if stacks.get(r["rank"]):
            r["stack"] = where(stacks[r["rank"]])[1]
            r["culprit"] = r["rank"] in culprits
    named = "; ".join(f"rank {c} on {node[c]} (at {where(stacks[c])[1]})" for c in culprits)
    failure.message = (f"{named} held the others: not in the {op} that rank(s) "
                       f"{', '.join(map(str, waiting))} waited in. {failure.message}")[:4000]
    blamed = sorted({node[c] for c in culprits} - {"?"})
    if set(blamed) != set(node.values()) - {"?"}:
        failure.nodes = blamed
    return failure

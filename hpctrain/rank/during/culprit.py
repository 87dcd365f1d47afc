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
own code: there the stacks cannot tell. PyTorch's flight recorder can, on gloo and NCCL alike
(flight.py): each rank's dump counts the collectives it enqueued in each process group, and the
ranks whose count lags the others' are the ones those wait for. Its verdict comes first; the
stacks' where it has none (no dumps: the recorder off, torch not loaded, a rank that could not
answer).
"""
from __future__ import annotations

import os
import re
from collections import Counter

from ..records import JobFailure

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


def _count(value) -> int | None:
    """A pg_status counter: torch writes them as decimal strings ("-1": none yet)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,18}", value):
        return int(value)
    return None


def enqueued(dump: dict) -> dict[tuple[str, str], int]:
    """{(recorder, process group id): the sequence number of the last collective this rank
    enqueued in it} from one rank's flight-recorder answer (flight.read_dump)."""
    from .flight import RECORDERS
    out = {}
    for recorder, _ in RECORDERS:
        data = dump.get("recorders", {}).get(recorder)
        status = data.get("pg_status") if isinstance(data, dict) else None
        if not isinstance(status, dict):
            continue
        for pg, counts in list(status.items())[:1000]:
            last = _count(counts.get("last_enqueued_collective")) if isinstance(counts, dict) else None
            # torch numbers its process groups; nothing else of a dump reaches the message
            if re.fullmatch(r"[0-9]{1,9}", pg) and last is not None:
                out[(recorder, pg)] = last
        # Every rank is in the default group (0), but torch lists a group in pg_status only
        # from its first collective on: a rank stalled before its first one has none there (a
        # real dump: pg_status {}, no entries). It enqueued nothing, so it lags any rank that
        # did. (Another group's members cannot be told from a dump: those are compared among
        # the ranks that list it; a count there that is no number tells nothing.)
        if "0" not in status:
            out[(recorder, "0")] = 0
    return out


def _op(dump: dict, recorder: str, pg: str, seq: int) -> str | None:
    """The name of collective `seq` of group `pg` in a rank's dump (e.g. gloo:all_reduce)."""
    data = dump.get("recorders", {}).get(recorder)
    entries = data.get("entries") if isinstance(data, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if (isinstance(entry, dict) and str(entry.get("pg_id")) == pg
                and entry.get("collective_seq_id") == seq and not entry.get("is_p2p")):
            name = entry.get("profiling_name")
            return name[:64] if isinstance(name, str) and name.isprintable() else None
    return None


def lagging(dumps: dict[int, dict]) -> tuple[list[int], str, list[int]] | None:
    """(the ranks whose last collective lags the others', what they lag, the ranks ahead) from
    the flight-recorder dumps of a hang, or None when every group's ranks are level."""
    counts = {r: enqueued(d) for r, d in dumps.items()}
    groups = sorted({g for c in counts.values() for g in c})
    behind: set[int] = set()
    said = []
    ahead: set[int] = set()
    for recorder, pg in groups:
        seen = {r: c[(recorder, pg)] for r, c in counts.items() if (recorder, pg) in c}
        low, high = min(seen.values()), max(seen.values())
        if len(seen) < 2 or low == high:
            continue
        late = sorted(r for r, n in seen.items() if n == low)
        early = sorted(r for r, n in seen.items() if n > low)
        behind.update(late)
        ahead.update(early)
        op = _op(dumps[early[0]], recorder, pg, low + 1)
        group = f"{'NCCL ' if recorder == 'nccl' else ''}process group {pg}"
        last = f"its last collective in {group} was #{low}" if low > 0 else f"it had enqueued no collective in {group}"
        said.append(f"{last}; rank(s) {', '.join(map(str, early))} wait in #{low + 1}"
                    f"{f' ({op})' if op else ''}")
    ahead -= behind
    if not behind or not ahead:
        return None
    return sorted(behind), "; ".join(said), sorted(ahead)


def read_dumps(run_dir: str, failure: JobFailure) -> dict[int, dict]:
    """The hang's flight-recorder dumps (the request's id is in the watcher's record)."""
    from .flight import read_dump
    from ..records import read_identities
    token = next((r.get("flight_recorder") for r in failure.ranks
                  if isinstance(r, dict) and isinstance(r.get("flight_recorder"), str)), None)
    if token is None:
        return {}
    out = {}
    for ident in read_identities(run_dir):
        dump = read_dump(run_dir, ident.rank, token)
        if dump is not None:
            out[ident.rank] = dump
    return out


def refine(run_dir: str, failure: JobFailure) -> JobFailure:
    """The watcher's hang record with its culprit named and blamed, when the flight recorder
    or the stacks tell."""
    from ..records import read_identities
    ranks = [r for r in failure.ranks if isinstance(r, dict) and isinstance(r.get("rank"), int)]
    node = {i.rank: str(i.node or "?") for i in read_identities(run_dir)}
    node.update({r["rank"]: str(r.get("node") or "?") for r in ranks})
    stacks = {}
    for r in ranks:
        offset = r.get("log_offset")
        stacks[r["rank"]] = read_stack(run_dir, r["rank"],
                                       offset if isinstance(offset, int) and offset > 0 else 0)
    for r in ranks:
        if stacks.get(r["rank"]):
            r["stack"] = where(stacks[r["rank"]])[1]

    def at(c: int) -> str:
        return f" (at {where(stacks[c])[1]})" if stacks.get(c) else ""
    lag = lagging(read_dumps(run_dir, failure))
    found = verdict(stacks)
    if lag is not None:
        culprits, said, _ = lag
        named = "; ".join(f"rank {c} on {node.get(c, '?')}{at(c)}" for c in culprits)
        head = f"{named} held the others (flight recorder): {said}."
    elif found is not None:
        culprits, op, waiting = found
        named = "; ".join(f"rank {c} on {node[c]}{at(c)}" for c in culprits)
        head = (f"{named} held the others: not in the {op} that rank(s) "
                f"{', '.join(map(str, waiting))} waited in.")
    else:
        return failure
    for r in ranks:
        r["culprit"] = r["rank"] in culprits
    if lag is not None and set(culprits) == {r["rank"] for r in ranks}:
        # The watcher named them already (behind in progress): its words first, then this.
        failure.message = f"{failure.message}; the flight recorder agrees: {said}"[:4000]
    else:
        failure.message = f"{head} {failure.message}"[:4000]
    blamed = sorted({node.get(c, "?") for c in culprits} - {"?"})
    if set(blamed) != set(node.values()) - {"?"}:
        failure.nodes = blamed
    return failure

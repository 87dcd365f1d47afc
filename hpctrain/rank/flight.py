"""PyTorch's flight recorder at a hang (issue 40): every collective's sequence number, per rank.

With TORCH_FR_BUFFER_SIZE (or its older name TORCH_NCCL_TRACE_BUFFER_SIZE) above 0 — the
templates export it for a job with launcher.hang_timeout — torch records each collective of
every process group, gloo's and NCCL's alike, in an in-memory ring, and counts them per group
(`pg_status`: the last one enqueued, started, completed). When the hang watcher (watch.py) finds
a hang it writes status/fr/request.json; each rank's responder (a thread the bootstrap starts,
waking once a second) writes its recorders' JSON dumps to status/fr/rank-R.json and then
status/fr/rank-R.ack with the request's id. culprit.py compares them: the rank whose last
collective lags the others' is the one they wait for, on NCCL too, where every stack looks alike.

Why not torch's own tools: its env-var dump (TORCH_FR_DUMP_TEMP_FILE) fires on an NCCL
watchdog timeout only (minutes after launcher.hang_timeout, never on gloo) and writes a
pickle, which the analyzer (torchfrtrace, torch.distributed.flight_recorder) loads with
pickle.load: a run directory is untrusted, and nothing read from it is ever unpickled. The
JSON dumps are torch's too, the same records: `_dump_nccl_trace_json` (ProcessGroupNCCL's own
recorder, CUDA builds only) and `_dump_fr_trace_json` (the recorder gloo writes to). Both are
underscored, so each is looked up and may be missing; a rank that has no torch loaded, or no
recorder, answers with none.

Stdlib only: torch is used only when the program has imported it already.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time

from .records import read_bytes, read_json, write_json

POLL = 1.0  # s between a responder's looks for a request
WAIT = 10.0  # s the watcher waits for every rank's answer
# (name in the dump file, torch._C._distributed_c10d's function)
RECORDERS = (("nccl", "_dump_nccl_trace_json"), ("cpu", "_dump_fr_trace_json"))


def directory(run_dir: str) -> str:
    return os.path.join(run_dir, "status", "fr")


def enabled(environ=os.environ) -> bool:
    """torch's own reading: TORCH_FR_BUFFER_SIZE, else TORCH_NCCL_TRACE_BUFFER_SIZE, else 0."""
    value = environ.get("TORCH_FR_BUFFER_SIZE", environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "0"))
    return value.strip().isdigit() and int(value) > 0


# ------------------------------------------------------------------- the watcher's side

def ask(run_dir: str, ranks: list[int], wait: float = WAIT) -> str | None:
    """Ask every rank for its dump and wait (at most `wait` s) until each of `ranks` answered.
    The request's id, or None when it could not be written."""
    token = f"{os.getpid()}-{time.time():.6f}"
    try:
        os.makedirs(directory(run_dir), exist_ok=True)
        write_json(os.path.join(directory(run_dir), "request.json"), {"id": token})
    except OSError:
        return None
    deadline = time.monotonic() + wait
    waiting = set(ranks)
    while waiting and time.monotonic() < deadline:
        time.sleep(0.2)
        waiting = {r for r in waiting if answered(run_dir, r) != token}
    return token


def answered(run_dir: str, rank: int) -> str | None:
    """The id of the request rank `rank` answered last, or None."""
    try:
        token = json.loads(read_bytes(os.path.join(directory(run_dir), f"rank-{rank}.ack"), 256))
    except (OSError, ValueError):
        return None
    return token if isinstance(token, str) else None


def read_dump(run_dir: str, rank: int, token: str) -> dict | None:
    """Rank `rank`'s answer to request `token` ({"rank", "request", "recorders"}), or None:
    missing, another request's, or not what a responder writes. Bounded, JSON only."""
    if answered(run_dir, rank) != token:
        return None
    try:
        data = read_json(os.path.join(directory(run_dir), f"rank-{rank}.json"))
    except (OSError, ValueError):
        return None
    if not (isinstance(data, dict) and data.get("request") == token and data.get("rank") == rank
            and isinstance(data.get("recorders"), dict)):
        return None
    return data


# ------------------------------------------------------------------- the rank's side

def start(run_dir: str, rank: int) -> threading.Thread | None:
    """The responder, where the flight recorder is on; a daemon thread that ends with the rank."""
    if not enabled():
        return None
    seen = _request(run_dir)  # an earlier attempt's: not this rank's to answer
    thread = threading.Thread(target=_respond, args=(run_dir, rank, seen),
                              name="hpctrain-flight-recorder", daemon=True)
    thread.start()
    return thread


def _request(run_dir: str) -> str | None:
    """The id of the watcher's request; read every second by every rank, so read small."""
    try:
        data = json.loads(read_bytes(os.path.join(directory(run_dir), "request.json"), 256))
    except (OSError, ValueError):
        return None
    token = data.get("id") if isinstance(data, dict) else None
    return token if isinstance(token, str) and 0 < len(token) <= 64 else None


def _respond(run_dir: str, rank: int, seen: str | None) -> None:
    while True:
        time.sleep(POLL)
        token = _request(run_dir)
        if token is None or token == seen:
            continue
        seen = token
        try:
            answer(run_dir, rank, token)
        except Exception:  # never the rank's end: the watcher waits a bounded time, then goes on
            pass


def dumps() -> dict:
    """{recorder: its JSON dump (parsed), or {"error": why}} of this process's torch."""
    torch = sys.modules.get("torch")
    c10d = getattr(getattr(torch, "_C", None), "_distributed_c10d", None)
    out: dict = {}
    for name, function in RECORDERS:
        dump = getattr(c10d, function, None)
        if dump is None:
            continue
        try:
            out[name] = json.loads(dump())
        except Exception as exc:  # a recorder torch could not dump: say why, dump the other
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return out


def answer(run_dir: str, rank: int, token: str) -> None:
    write_json(os.path.join(directory(run_dir), f"rank-{rank}.json"),
               {"rank": rank, "request": token, "pid": os.getpid(), "recorders": dumps()},
               indent=None)
    # Last, and small: the watcher polls it, not the dump.
    write_json(os.path.join(directory(run_dir), f"rank-{rank}.ack"), token, indent=None)

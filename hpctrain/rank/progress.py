"""Progress: each rank says how far its training got — for `status`, `submit --wait`, and the
hang detection that ends a job in which no rank moves any more.

    from hpctrain.rank.progress import report     # or, under the bootstrap, any interpreter:
    report(iteration, reward=mean_return)         # import hpctrain_progress; hpctrain_progress.report(...)

report() is cheap enough to call every iteration: it writes RUN_DIR/status/progress-R.json
(records.Progress) at most once a second (and always on the first call), atomically; a report
the rate limit held back is written by a timer once the second is over (and when the process
exits), so the last step is never lost — not even by a rank that blocks right after reporting,
whose step the hang watcher compares with the others' to name it. The
library hooks of the rank side call it at every iteration boundary of the RL libraries; a plain
program calls it itself. Outside an hpctrain run (no HPCTRAIN_RUN_DIR) it does nothing.
"""
from __future__ import annotations

import atexit
import os
import threading
import time

from .records import Progress, write_progress

MIN_INTERVAL = 1.0  # seconds between two writes of one rank's file

_state = {"last_write": 0.0, "first": None, "first_step": None, "pending": None, "timer": None}
_lock = threading.Lock()


def report(step: int, **metrics: float) -> None:
    """This rank reached `step` (an iteration, an update, an epoch: the library's own count);
    `metrics` are the newest values of what it logs (reward, loss, ...)."""
    run_dir = os.environ.get("HPCTRAIN_RUN_DIR")
    if not run_dir:
        return
    now = time.time()
    with _lock:
        if _state["first"] is None:
            _state["first"], _state["first_step"] = now, step
            atexit.register(_flush)
            if os.environ.get("HPCTRAIN_RANK", os.environ.get("RANK", "0")) == "0":
                from .phases import mark  # the library's first iteration (rank/phases.py)
                mark("rank-0.json", {"first_step": now})
        elif now - _state["last_write"] < MIN_INTERVAL:
            _state["pending"] = (step, metrics, now)
            if _state["timer"] is None:
                timer = threading.Timer(MIN_INTERVAL - (now - _state["last_write"]), _flush)
                timer.daemon = True
                _state["timer"] = timer
                timer.start()
            return
        _write(run_dir, step, metrics, now)


def _flush() -> None:
    with _lock:
        _state["timer"] = None
        pending, _state["pending"] = _state["pending"], None
        run_dir = os.environ.get("HPCTRAIN_RUN_DIR")
        if pending and run_dir:
            _write(run_dir, *pending)


def _write(run_dir: str, step: int, metrics: dict, now: float) -> None:
    _state["last_write"], _state["pending"] = now, None
    elapsed = now - _state["first"]
    done = step - _state["first_step"]
    rate = done / elapsed if elapsed > 0 and done > 0 else None
    clean = {}
    for key, value in metrics.items():
        try:
            clean[str(key)] = float(value)
        except (TypeError, ValueError):
            continue
    try:
        write_progress(os.path.join(run_dir, "status"), Progress(
            rank=int(os.environ.get("HPCTRAIN_RANK", os.environ.get("RANK", "0"))), step=int(step),
            time=now, rate=rate, metrics=clean,
            attempt=int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0), since=_state["first"]))
    except OSError:
        pass  # progress is a report, never a reason for the training to fail

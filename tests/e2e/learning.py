"""The check that a real training happened, on every rank of a finished run.

Each example program writes, in results/rank-R.json, the digest of its weights as they were when
the training started (after the library put rank 0's weights on every rank) and at the end, and a
loss the library itself computed at its first and its last update ("loss" says which).
"""
from __future__ import annotations

import math


def check_learned(results: list[dict]) -> None:
    initial = {r["initial_params_sha256"] for r in results}
    # One start for all ranks: rank 0's weights, broadcast by the library (the Pendulum and
    # DI-engine examples build each rank's own from its own seed, so equal means broadcast).
    assert len(initial) == 1 and None not in initial, f"ranks started from different weights: {results}"
    for r in results:
        rank = r["rank"]
        assert r["params_sha256"] != r["initial_params_sha256"], f"rank {rank}: the weights never changed: {r}"
        first, last = r["first_loss"], r["last_loss"]
        assert isinstance(first, float) and isinstance(last, float), f"rank {rank}: no loss recorded: {r}"
        assert math.isfinite(first) and math.isfinite(last), f"rank {rank}: {r['loss']} {first} -> {last}"
        assert first != last, f"rank {rank}: {r['loss']} stayed at {first}: {r}"

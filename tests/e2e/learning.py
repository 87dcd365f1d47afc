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


# The libraries whose hooks report a main metric (rsl-rl keeps episode rewards on rank 0 only;
# ding's learner reports its loss, the rewards are its collector's). The skrl examples turn
# skrl's tracking off (write_interval 0: it would clear the losses they read), and with it its
# episode rewards: no metric is expected of them.
MAIN_METRIC = {"rl_games": "reward", "rsl_rl": "reward", "di_engine": "loss"}


def check_trained(results: list[dict], log: str, world: int, hosts: int) -> None:
    """Every rank of a `world` over `hosts` hosts finished, with the same weights, and trained."""
    assert sorted(r["rank"] for r in results) == list(range(world)), log[-3000:]
    assert {r["world_size"] for r in results} == {world}
    assert len({r.get("hostname") or r.get("host") for r in results}) == hosts, results
    digests = {r["params_sha256"] for r in results}
    assert len(digests) == 1, f"weights differ across ranks: {results}"
    check_learned(results)


def check_progress(cli, ref: str, run_dir, results: list[dict], library: str,
                   per_update: int = 1) -> None:
    """The library hooks (hpctrain/rank/during/train_hooks.py) reported every rank's last iteration
    (skrl counts environment timesteps: `per_update` of them per update) and finite metrics
    (the library's main one where it has it), and `status --json` carries them."""
    import json

    from hpctrain.rank.records import read_progress
    reports = {p.rank: p for p in read_progress(str(run_dir))}
    assert sorted(reports) == sorted(r["rank"] for r in results), reports
    for r in results:
        p = reports[r["rank"]]
        assert p.step == r["iteration"] * per_update, (p, r)
        assert all(math.isfinite(v) for v in p.metrics.values()), p
    if library in MAIN_METRIC:
        assert MAIN_METRIC[library] in reports[0].metrics, reports[0]
    [shown] = json.loads(cli("status", ref, "--json").stdout)["progress"]
    assert shown["step"] == shown["min_step"] == reports[0].step, shown
    assert shown["metrics"] == reports[0].metrics, shown
    if library in MAIN_METRIC:
        assert shown["metric"] == MAIN_METRIC[library] and math.isfinite(shown["value"]), shown
    assert [r["rank"] for r in shown["ranks"]] == sorted(reports), shown

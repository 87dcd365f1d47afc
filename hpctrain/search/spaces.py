"""`search:` -> Optuna's distributions, sampler and pruner (public API only)."""
from __future__ import annotations

from ..errors import HpctrainError


def optuna():
    try:
        import optuna as _optuna
    except ImportError:
        raise HpctrainError("a study (search:) needs Optuna, which is not installed here",
                            fix="pip install 'hpctrain[search]'") from None
    _optuna.logging.set_verbosity(_optuna.logging.WARNING)
    return _optuna


def distributions(search) -> dict:
    o = optuna()
    out = {}
    for key, p in search.params.items():
        kind = p.kind
        if kind == "categorical":
            out[key] = o.distributions.CategoricalDistribution(list(p.choices))
        elif kind == "int":
            out[key] = o.distributions.IntDistribution(int(p.low), int(p.high), log=p.log)
        else:
            out[key] = o.distributions.FloatDistribution(float(p.low), float(p.high), log=p.log)
    return out


def sampler(search):
    o = optuna()
    if search.sampler == "random":
        return o.samplers.RandomSampler(seed=search.seed)
    # Each worker asks while others still run: TPE's constant liar keeps them apart.
    return o.samplers.TPESampler(seed=search.seed, constant_liar=True,
                                 n_startup_trials=min(10, max(2, search.n_trials // 3)))


def pruner(search):
    o = optuna()
    warm = search.warmup_steps
    if search.pruner == "none":
        return o.pruners.NopPruner()
    if search.pruner == "median":
        return o.pruners.MedianPruner(n_startup_trials=max(1, min(search.parallel, 3)),
                                      n_warmup_steps=warm)
    if search.pruner == "hyperband":
        return o.pruners.HyperbandPruner(min_resource=max(1, warm))
    return o.pruners.SuccessiveHalvingPruner(min_resource=max(1, warm))

"""Population-based training's own checks at load (search.method pbt): the rules of the
population, and what cannot change in the middle of a run. The population itself (members,
checkpoints, lineage) is hpctrain/search/pbt/; this module knows nothing of it.

A member in the bottom fraction continues from another member's checkpoint with new values, so
every value PBT changes must be one the program takes again at a restart from a checkpoint, and
the library must resume from a checkpoint at all (its adapter's checkpoint patterns).
"""
from __future__ import annotations

import re

from ..errors import HpctrainError
from ..libraries import adapter
from ..schema.spec import JobSpec

# Keys whose value the checkpoint's tensors are shaped by: a member that copies another's
# checkpoint with a different value cannot load it.
_SHAPED = re.compile(r"(^|[._-])(hidden_dims|actor_hidden_dims|critic_hidden_dims|units|"
                     r"layers|mlp|network|num_envs|num-envs|num_observations|num_actions)$")


def bottom_count(parallel: int, fraction: float) -> int:
    """Members in the bottom (and in the top) fraction: at least one of each."""
    return max(1, int(parallel * fraction))


def check_pbt(spec: JobSpec, where) -> None:
    """search.method pbt's mistakes, each one HpctrainError at its key."""
    search = spec.search
    pbt = search.pbt
    if search.method != "pbt":
        if pbt is not None:
            raise HpctrainError("search.pbt: is set but search.method is not pbt",
                                where(("search", "pbt")),
                                "set search.method: pbt, or remove search.pbt")
        return
    if pbt is None:
        raise HpctrainError("search.method pbt needs search.pbt: its interval and length",
                            where(("search", "method")),
                            "add search.pbt: {interval: 10, steps: 200}")
    if search.parallel < 2:
        raise HpctrainError(f"search.parallel is {search.parallel}: a population needs at least "
                            "2 members (each a run of the job's shape, all at once)",
                            where(("search", "parallel")), "set search.parallel: 4 (or more)")
    if pbt.interval >= pbt.steps:
        raise HpctrainError(f"search.pbt.interval {pbt.interval} is not below search.pbt.steps "
                            f"{pbt.steps}: no member would ever copy another",
                            where(("search", "pbt", "interval")),
                            "make the interval a fraction of the training, e.g. steps / 20")
    for key, rule in pbt.explore.items():
        at = where(("search", "pbt", "explore", key))
        if key not in search.params:
            raise HpctrainError(f"search.pbt.explore.{key}: not a parameter of search.params",
                                at, f"name one of: {', '.join(search.params)}")
        if rule == "perturb" and search.params[key].kind == "categorical":
            raise HpctrainError(f"search.pbt.explore.{key}: perturb multiplies a number, and "
                                f"'{key}' is categorical", at, f"set {key}: resample")
    lib = adapter(spec.library)
    if not lib.checkpoint_patterns(spec):
        raise HpctrainError(
            f"library {spec.library} is never resumed from a checkpoint by hpctrain (no "
            "checkpoint patterns), so a member cannot continue from another member's checkpoint",
            where(("library",)), "use a library hpctrain resumes (command, rl_games, rsl_rl, "
            "skrl, skrl_jax, di_engine), or a study (search.method optuna)")
    for key in search.params:
        at = where(("search", "params", key))
        if _SHAPED.search(key):
            raise HpctrainError(
                f"search.params.{key} cannot change in the middle of a run: the checkpoint's "
                "tensors are shaped by it, so a member given another value could not load the "
                "checkpoint it copies", at,
                "tune it with a study (search.method optuna), or leave it out of a PBT")
        for pattern, why in lib.restored_from_checkpoint:
            if re.search(pattern, key):
                raise HpctrainError(f"search.params.{key} cannot change in the middle of a "
                                    f"{spec.library} run: {why}", at,
                                    "tune it with a study (search.method optuna), or a value the "
                                    "library does not restore (entropy_coef, clip_param, ...)")


# search: keys a population never reads (search/pbt/member.py), and why: they shape Optuna's
# trials, and a member is no trial. Given with method pbt, each is named at load, not dropped in
# silence.
IGNORED = {
    "n_trials": "a population runs `parallel` members, each once to search.pbt.steps; there are "
                "no trials to count",
    "sampler": "a member's first values are drawn uniformly from the space (or log-uniformly), "
               "and later ones by explore, not by a sampler",
    "pruner": "a member is never stopped early; a poor one copies a better one's checkpoint at "
              "the next interval instead",
    "warmup_steps": "it is the pruner's warm-up, and a population has no pruner",
}


def ignored(spec: JobSpec, given: dict, where) -> list[str]:
    """Warnings for the optuna-only keys a population was given (`given`: the merged search:
    document, before defaults): which, where, and why it has no effect."""
    if spec.search.method != "pbt":
        return []
    return [f"{where(('search', key))}: search.{key} has no effect with search.method pbt: "
            f"{why}; remove it" for key, why in IGNORED.items() if key in given]


def shape(spec: JobSpec) -> str:
    """What `validate` and `submit --dry-run` say of a population."""
    s, r, pbt = spec.search, spec.resources, spec.search.pbt
    each = f"{r.nodes} node(s) x {r.gpus_per_node or 0} GPU(s)"
    if r.time:
        each += f", time {r.time}"
    k = bottom_count(s.parallel, pbt.fraction)
    return (f"population-based training: {s.parallel} member(s) of {', '.join(s.params)}, each "
            f"an allocation of {each}, all at once for {pbt.steps} step(s); every {pbt.interval} "
            f"step(s) the bottom {k} copy one of the top {k} and explore; {s.direction} "
            f"'{s.metric}'")

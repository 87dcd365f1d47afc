"""`hpctrain eval RUN`: an evaluation job derived from a run (job/derived.py), one task per
checkpoint, each playing that checkpoint a bounded number of episodes or steps with a fixed seed
through its library's play path (libraries/*.play), its result a record in the run
(rank/after/evaluate.py writes it, runs/evaluations.py reads it back).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import msgspec

from ..errors import HpctrainError
from ..libraries import adapter
from ..rank.end.checkpoints import find_checkpoint
from ..runs import evaluations
from ..runs.records import Run
from .checks import array_limit
from .derived import FromRun, as_array, from_run, new_place, one_rank
from .load import Job

EVAL_MODULE = "_hpctrain_rank.after.evaluate"  # the run's copy of rank/, as the bootstrap loads it
PLAY_DIR = "play"  # each task's folder for what its play writes
# A checkpoint's path reaches the play's command line: only names hpctrain can pass as they are.
_SAFE_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*(/[A-Za-z0-9_][A-Za-z0-9._+-]*)*")
_CHOICE = re.compile(r"latest|best|all|[0-9]{1,12}")


class EvalPlan(msgspec.Struct, frozen=True, kw_only=True):
    job: Job
    run_id: str
    source: FromRun
    chosen: list[evaluations.Checkpoint]
    rule: str  # how the checkpoints were chosen, in words
    skipped: list[str]  # checkpoints left out (a name hpctrain cannot pass), why


def _choose(source: FromRun, which: str, every: int | None,
            found: list[evaluations.Checkpoint]) -> tuple[list[evaluations.Checkpoint], str]:
    run = source.run
    if which == "latest":
        # The checkpoint a resume would start from: the same search (rank/end/checkpoints.py).
        newest = find_checkpoint(str(run.path), adapter(source.job.spec.library)
                                 .checkpoint_patterns(source.job.spec))
        rel = newest and os.path.relpath(newest, run.path)
        pick = [c for c in found if c.path == rel] or found[-1:]
        return pick, "the newest checkpoint (the one a resume starts from)"
    if which == "best":
        done, _ = evaluations.read(run.path)
        top = evaluations.best(done)
        if top is None:
            return _best_by_training(source, found)
        pick = [c for c in found if c.path == top.checkpoint]
        if not pick:
            raise HpctrainError(f"the best evaluated checkpoint {top.checkpoint} of run {run.id} "
                                "is no longer in the run", fix="evaluate again: --checkpoint all")
        return pick, (f"best by evaluation: the highest mean return, {top.mean_return:.6g} "
                      f"(evaluated {top.evaluated})")
    if which == "all":
        step = every or 1
        pick = found[::step]
        if found and pick[-1] is not found[-1]:
            pick.append(found[-1])  # the last one is always evaluated
        return pick, "every checkpoint" if step == 1 else f"one checkpoint in {step}, and the last"
    n = int(which)
    pick = [c for c in found if c.iteration == n][-1:]
    if not pick:
        have = ", ".join(str(c.iteration) for c in found[-8:] if c.iteration is not None)
        raise HpctrainError(f"run {run.id} has no checkpoint of iteration {n}",
                            fix=f"one of its iterations ({have or 'none numbered'}), or latest")
    return pick, f"the checkpoint of iteration {n}"


def _best_by_training(source: FromRun, found: list[evaluations.Checkpoint]
                      ) -> tuple[list[evaluations.Checkpoint], str]:
    """With no evaluation yet: the checkpoint whose iteration has the highest value of the
    library's main metric on the training curve (its TensorBoard events), said so."""
    from ..follow.curves import read_run
    run, spec = source.run, source.job.spec
    try:
        scalars = read_run(str(run.path))
    except HpctrainError:  # no event files, or no tensorboard to read them
        scalars = []
    for tag in adapter(spec.library).main_scalars:
        for curve in (s.curve(tag) for s in scalars if tag in s.tags):
            at = dict(zip(curve.steps, curve.values))
            scored = [(at[c.iteration], c) for c in found if c.iteration in at]
            if scored:
                value, best = max(scored, key=lambda p: (p[0], p[1].iteration))
                return [best], (f"best by training, no evaluation yet: the highest {tag} "
                                f"({value:.6g}) at a checkpoint's iteration (after an eval "
                                "--checkpoint all, best is by evaluation)")
    raise HpctrainError(f"run {run.id} has no evaluation yet and no training curve of "
                        f"{' or '.join(adapter(spec.library).main_scalars) or 'a main metric'} "
                        "at its checkpoints' iterations: no rule can say which is best",
                        fix=f"hpctrain eval {run.id} --checkpoint all (or --every K) first")


def plan(run: Run, which: str = "latest", every: int | None = None, episodes: int = 10,
         steps: int | None = None, time: str | None = None) -> EvalPlan:
    if not _CHOICE.fullmatch(which):
        raise HpctrainError(f"--checkpoint {which!r}: not latest, best, all or an iteration",
                            fix="e.g. --checkpoint all, --checkpoint 50")
    if every is not None and (which != "all" or every < 1):
        raise HpctrainError("--every K takes every K-th checkpoint of --checkpoint all (K >= 1)",
                            fix="hpctrain eval RUN --checkpoint all --every 5")
    if not 1 <= episodes <= 100_000 or (steps is not None and not 1 <= steps <= 10_000_000):
        raise HpctrainError("--episodes is 1..100000 and --steps 1..10000000",
                            fix="e.g. --episodes 10 --steps 1000")
    source = from_run(run)
    spec = source.job.spec
    lib = adapter(spec.library)
    listed = evaluations.checkpoints(run.path, lib.checkpoint_patterns(spec))
    found = [c for c in listed if _SAFE_PATH.fullmatch(c.path)]
    skipped = [f"{c.path[:80]!r}: a name hpctrain does not pass to a command line"
               for c in listed if c not in found]
    if not found:
        where = ", ".join(lib.checkpoint_patterns(spec)) or "(the library names no pattern)"
        raise HpctrainError(f"run {run.id} has no checkpoint to evaluate: none matches {where} "
                            f"in {run.path}", fix="evaluate a run that saved a checkpoint "
                            "(a plain program saves into $HPCTRAIN_CHECKPOINT_DIR)")
    chosen, rule = _choose(source, which, every, found)
    if len(chosen) > array_limit(source.job.site):
        raise HpctrainError(f"{len(chosen)} checkpoints are more than one job array of site "
                            f"'{source.job.site.name}' may hold ({array_limit(source.job.site)})",
                            fix=f"--every {-(-len(chosen) // array_limit(source.job.site))}")
    name = f"{spec.name[:54]}-eval"
    run_id, eval_dir = new_place(source, name)
    seed = spec.seed if spec.seed is not None else 0
    jobs = []
    for i, ckpt in enumerate(chosen):
        task_dir = eval_dir / "tasks" / str(i) if len(chosen) > 1 else eval_dir
        out = str(task_dir / PLAY_DIR)
        play = lib.play(spec, str(run.path / ckpt.path), episodes, steps, seed, out)
        wrapper = ["--run", str(run.path), "--checkpoint", ckpt.path, "--episodes", str(episodes),
                   "--seed", str(seed), "--results", play.results, "--out", out,
                   "--eval-run", run_id, "--method", play.method]
        if ckpt.iteration is not None:
            wrapper += ["--iteration", str(ckpt.iteration)]
        if steps is not None:
            wrapper += ["--steps", str(steps)]
        if play.seconds is not None:
            wrapper += ["--seconds", str(play.seconds)]
        if play.in_out:
            wrapper.append("--in-out")
        wrapper += [f"--cpu-arg={a}" for a in play.cpu_args]
        program = ["-m", EVAL_MODULE, *wrapper, "--", *play.command]
        if not jobs:
            job = one_rank(source, name, program, {}, time)
        else:  # the same job but for its program's arguments: validated once, not per checkpoint
            first = jobs[0][1]
            job = msgspec.structs.replace(first, spec=msgspec.structs.replace(
                first.spec, script=program[0], args=program[1:]))
        jobs.append(({"iteration": ckpt.iteration, "checkpoint": os.path.basename(ckpt.path)}, job))
    return EvalPlan(job=as_array(jobs), run_id=run_id, source=source, chosen=chosen, rule=rule,
                      skipped=skipped)

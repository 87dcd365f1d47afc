"""Job chains: a run that starts only after other runs ended (train -> evaluate, a long training
split across time limits, a sweep after its data preparation).

    after: RUN                      # afterok: starts once RUN completed successfully
    after: [afterany:RUN1, RUN2]    # afterany: however RUN1 ended; afternotok: only if it failed
    hpctrain submit eval.yaml --after RUN   # the same from the command line (replaces `after`)

RUN is what `hpctrain status` takes: a run id (or its end), a run directory or a job id. Each is
resolved while the job loads to the scheduler's job id (an error names a run that does not
exist, has no job, ran on another scheduler, or already ended so that the condition can never
hold); the scheduler holds the job until then (Slurm: `--dependency`). Slurm would keep a job
whose condition can no longer hold pending forever, so hpctrain also asks for
`--kill-on-invalid-dep=yes` (a job's `sbatch: {kill-on-invalid-dep: "no"}` keeps Slurm's way).
Slurm treats a job id it no longer remembers as a met condition; so `submit` asks for the live
state of every run it waits for (check_live) and refuses what cannot be decided.
"""
from __future__ import annotations

import re

from ..errors import HpctrainError

MODES = ("afterok", "afterany", "afternotok")
_MODE = re.compile(r"after[a-z_]*")


def parse(text: str) -> tuple[str, str]:
    """'afterany:RUN' -> ('afterany', 'RUN'); 'RUN' -> ('afterok', 'RUN')."""
    head, sep, tail = str(text).strip().partition(":")
    mode, ref = (head, tail.strip()) if sep and _MODE.fullmatch(head) else ("afterok", str(text).strip())
    if mode not in MODES:
        raise ValueError(f"'{mode}' is not one of {', '.join(MODES)}")
    if not ref:
        raise ValueError("it names no run")
    return mode, ref


def as_text(ref) -> str:
    """A run reference from Python: a Handle, a Run, a path or a string."""
    run = getattr(ref, "run", ref)
    path = getattr(run, "path", None)
    return str(path) if path is not None else str(ref)


def entries(value) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def resolve(spec, site, where) -> tuple[dict, ...]:
    """The job's `after:` entries -> ({mode, run_id, job_id, path}, ...), or an error."""
    wanted = entries(spec.after)
    if not wanted:
        return ()
    from ..backends import backend_class
    from ..runs.records import find
    at = where(("after",))
    chosen = backend_class(site.scheduler)
    if not chosen.dependencies:
        raise HpctrainError(f"site '{site.name}' runs a job at once: it cannot wait for another "
                            "run ('after')", at, "submit it when the other run has ended, or "
                            "use a cluster site (--site NAME)")
    out = []
    for text in wanted:
        try:
            mode, ref = parse(text)
        except ValueError as exc:
            raise HpctrainError(f"'after' entry {text!r}: {exc}", at,
                                "give RUN, or afterok:RUN, afterany:RUN, afternotok:RUN") from None
        try:
            run = find(ref)
            rec = run.record
        except HpctrainError as exc:
            raise HpctrainError(f"'after' names {ref!r}: {exc.what}", at, exc.fix) from None
        if rec.job_id is None:
            raise HpctrainError(f"'after' names run {run.id}, which has no job (its submit did "
                                "not finish)", at, "name a run that was submitted")
        scheduler = rec.scheduler or rec.backend
        if not chosen.waits_for(scheduler):
            raise HpctrainError(f"'after' names run {run.id}, which ran on '{scheduler}'; this "
                                f"job goes to '{site.scheduler}' (site '{site.name}')", at,
                                "a job can only wait for runs of its own scheduler")
        if not re.fullmatch(chosen.job_id_pattern, str(rec.job_id)):
            # Read from another run's record (shared, untrusted data) and put into a directive:
            # held to the scheduler's own id pattern, so that no value adds a line or an option.
            raise HpctrainError(f"'after' names run {run.id}, whose {run.path / 'run.json'} "
                                f"key 'job_id' {str(rec.job_id)[:40]!r} is not a {chosen.name} "
                                "job id", at, "restore that run's run.json, or wait for another run")
        if rec.final:
            _never(mode, run.id, rec.job_id, rec.state, at)
        out.append({"mode": mode, "run_id": run.id, "job_id": str(rec.job_id),
                    "path": str(run.path)})
    return tuple(out)


def _never(mode: str, run_id: str, job_id, state: str, at) -> None:
    """Refuse a condition that the run's final state can no longer meet."""
    ok = state == "COMPLETED"
    if (mode == "afterok" and not ok) or (mode == "afternotok" and ok):
        other = "afterany" if mode == "afterok" else "afterok"
        raise HpctrainError(f"run {run_id} (job {job_id}) already ended {state}: {mode} can "
                            "never be satisfied", at,
                            f"use {other}:{run_id}, or resubmit that run first")


def directives(after: tuple[dict, ...], options: dict) -> list[tuple[str, str | None]]:
    """The directive-table entries: one --dependency (every condition must hold), and
    --kill-on-invalid-dep=yes unless the job's own `sbatch:` options say otherwise."""
    if not after:
        return []
    by_mode: dict[str, list[str]] = {}
    for dep in after:
        by_mode.setdefault(dep["mode"], [])
        if dep["job_id"] not in by_mode[dep["mode"]]:
            by_mode[dep["mode"]].append(dep["job_id"])
    value = ",".join(f"{mode}:{':'.join(ids)}" for mode, ids in by_mode.items())
    out: list[tuple[str, str | None]] = [("dependency", value)]
    if not any(k.replace("_", "-") == "kill-on-invalid-dep" for k in options):
        out.append(("kill-on-invalid-dep", "yes"))
    return out


def check_live(job) -> None:
    """At submit: each run waited for, as its scheduler sees it now (one query for all). A run
    that ended so that the condition can never hold, or whose end nobody can tell any more
    (Slurm forgot it and the run's record has no final state), is refused."""
    if not job.after:
        return
    from pathlib import Path

    from ..runs.records import Run
    from ..follow.status import gather_many
    at = job.origins(("after",)) if job.origins is not None else job.source
    states = gather_many([Run(Path(d["path"])) for d in job.after])
    for dep, st in zip(job.after, states):
        state = st.state.state.value
        if st.state.done:
            _never(dep["mode"], dep["run_id"], dep["job_id"], state, at)
        elif state == "UNKNOWN":
            raise HpctrainError(
                f"cannot tell how run {dep['run_id']} (job {dep['job_id']}) ended: "
                f"{st.state.reason or 'its scheduler no longer knows it'}; Slurm would take the "
                "condition as met", at, "submit without 'after' if it succeeded")

"""What runs are doing: their backend's state and the ranks' own records, as data.

Used by `hpctrain status/list/cancel/submit --wait` and by the Python Handle alike; the text
shown for it is follow/display.py's. The scheduler is asked about many runs in one query per backend.
"""
from __future__ import annotations

import time
from pathlib import Path

import msgspec

from ..backends import JobState, State, for_run
from ..backends.commands import SchedulerError
from ..errors import HpctrainError
from . import startup
from .progress import TrainingProgress, of_run
from ..rank.during import slow
from ..rank.records import read_excluded, read_job_failure, read_job_failures, read_rank_failures
from ..runs import evaluations
from ..runs.records import Run, add_to_index, being_submitted, indexed


class RunStatus(msgspec.Struct, kw_only=True):
    run_id: str
    name: str
    site: str
    backend: str
    job: str | None
    path: str
    submitted: str | None
    nodes: int
    ranks_per_node: int
    state: JobState
    failures: list[dict] = []  # rank failures (rank/records.RankFailure), first ones first
    task_values: list[dict] = []  # a sweep: what each task changes
    ended: str | None = None  # why the job ended without success (status/failure.json)
    # How far the training got (follow/progress.py): the run's, or each sweep task's that reported.
    progress: list[TrainingProgress] = []
    # What it waits for (waits_for below): [{mode, run_id, job, state, verdict}], while it
    # waits, or when its scheduler gave up on it because a condition can never hold.
    waits_for: list[dict] = []
    # Nodes the run's requeues and `submit --resume` leave out, and why (status/excluded.json).
    excluded: list[dict] = []
    jobs: list[str] = []  # earlier job ids of this run (before `submit --resume`)
    # Time to first step, per attempt (follow/startup.py): the phases before the first step.
    startup: list[dict] = []
    # Ranks running below the run's slow_rank_factor x the median rate (rank/during/slow.py), slowest first.
    slow: list[dict] = []
    # The run's earlier attempts that failed (status/failures.jsonl), oldest first: each
    # {attempt, job_id, reason, message, without (the nodes its requeue left out)}.
    history: list[dict] = []
    # Nodes a spare replaced inside the allocation (rank/before/spares.py), oldest first: each
    # {job_id, attempt, out, in, why, back_s (from the failure to the next first step)}.
    replacements: list[dict] = []
    # The run's evaluation records (runs/evaluations.py), by iteration, and one line per record
    # that could not be read: read for one run's status (with_evaluations), not for `list`.
    evaluations: list[dict] = []
    evaluation_problems: list[str] = []
    # A job derived from a run (an evaluation): {"run": its directory, "purpose": "evaluation"}.
    derived_from: dict | None = None

    def to_json(self) -> dict:
        d = msgspec.to_builtins(self)
        d["state"]["done"] = self.state.done
        return d


def _recorded(run: Run) -> JobState:
    """The last state recorded in run.json: a final state is kept there once seen."""
    rec = run.record
    tasks = [JobState(_state(t[1]), exit_code=t[2], job=t[0]) for t in rec.task_states]
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t.state.value] = counts.get(t.state.value, 0) + 1
    return JobState(_state(rec.state), exit_code=rec.exit_code, job=str(rec.job_id),
                    tasks=tasks, counts=counts, reason=rec.reason)


def _state(word: str) -> State:
    try:
        return State(word)
    except ValueError:  # SUBMITTING, SUBMITTED: recorded before the scheduler answered
        return State.PENDING if word in ("SUBMITTING", "SUBMITTED") else State.UNKNOWN


def _keep(run: Run, state: JobState) -> JobState:
    """Record what the scheduler said; fall back on the record when it says nothing new."""
    rec = run.record
    if state.state == State.UNKNOWN and rec.final:
        return _recorded(run)
    if state.done:
        # Kept: Slurm forgets a job MinJobAge seconds after it ends (without accounting).
        run.update(state=state.state.value, exit_code=state.exit_code, final=True,
                   reason=state.reason,
                   task_states=[[t.job, t.state.value, t.exit_code] for t in state.tasks])
    elif state.state.value != rec.state and state.state != State.UNKNOWN:
        run.update(state=state.state.value)
    return state


def _adopted(run: Run, states: dict) -> bool:
    """A run without a job id: its submit is still going, or was killed before it recorded the
    id — then the job is found by its run directory, or there is none."""
    if being_submitted(run.path):
        states[run.path] = JobState(State.PENDING, reason="being submitted")
        return False
    name = run.record.backend
    try:
        job_id = for_run(run).adopt(run)
    except KeyError:
        states[run.path].reason = f"unknown backend '{name}' in run.json"
        return False
    except SchedulerError as exc:
        states[run.path].reason = f"cannot reach {name}: {exc}"
        return False
    if job_id is None:
        lost = JobState(State.LOST, reason="the submit was interrupted before a job was queued: "
                        "nothing of this run runs")
        states[run.path] = _keep(run, lost)
        return False
    run.update(job_id=job_id, state="SUBMITTED")
    try:
        add_to_index(run)  # found by its job id from now on
    except HpctrainError:
        pass  # an index that cannot be written: the run is still found by its id or path
    return True


def _status(run: Run, state: JobState, waits: dict) -> RunStatus:
    rec = run.record
    failure = read_job_failure(str(run.path))
    progress = of_run(str(run.path), rec.array_size)
    excluded = read_excluded(str(run.path))
    attempts = startup.attempts(str(run.path), rec.submitted)
    derived = rec.extra.get("derived_from")
    derived = ({"run": derived["run"], "purpose": derived["purpose"]}
               if isinstance(derived, dict) and isinstance(derived.get("run"), str)
               and isinstance(derived.get("purpose"), str) else None)
    return RunStatus(run_id=run.id, name=rec.name, site=rec.site, backend=rec.backend,
                     job=str(rec.job_id), path=str(run.path), submitted=rec.submitted,
                     nodes=rec.nodes, ranks_per_node=rec.procs_per_node, state=state,
                     failures=[f.to_dict() for f in read_rank_failures(str(run.path))],
                     task_values=rec.task_values,
                     ended=f"{failure.reason}: {failure.message}" if failure else None,
                     progress=progress, slow=_slow(str(run.path), progress),
                     waits_for=waits.get(run.path, []),
                     excluded=[{"node": e.node, "reason": e.reason, "message": e.message,
                                "time": e.time} for e in excluded],
                     history=_history(str(run.path), excluded),
                     jobs=[str(j) for j in rec.jobs],
                     startup=attempts, replacements=startup.replacements(str(run.path), attempts),
                     derived_from=derived)



def _history(run_dir: str, excluded: list) -> list[dict]:
    """The earlier failed attempts, each with the nodes left out after it."""
    out = []
    for f in read_job_failures(run_dir)[-100:]:
        without = [e.node for e in excluded
                   if e.node in f.nodes and e.reason == f.reason
                   and (not e.job_id or not f.job_id or e.job_id == f.job_id)]
        out.append({"attempt": f.job_restart + 1, "job_id": f.job_id, "reason": f.reason,
                    "message": f.message[:1000], "without": without})
    return out


def _slow(run_dir: str, progress: list[TrainingProgress]) -> list[dict]:
    """The run's own slow ranks, judged as the job judges them (rank/during/slow.py)."""
    own = next((p for p in progress if p.task is None), None)
    cfg = slow.settings(run_dir) if own else None
    return slow.find(own.ranks, cfg["factor"], cfg["window"]) if cfg else []


# Slurm's reasons for holding a job, or ending it, over its dependencies.
_DEPENDENCY_REASONS = ("Dependency", "DependencyNeverSatisfied")


def _waiting(runs: list[Run], states: dict, live: bool) -> dict:
    """For each run that waits for others (or was ended because it never can): those runs'
    states now, in one more query for all of them (waits_for below)."""
    waiting = [r for r in runs if r.record.after and (not states[r.path].done or
                                                      states[r.path].reason in _DEPENDENCY_REASONS)]
    if not waiting:
        return {}
    targets: dict[str, Run] = {}
    for run in waiting:
        for dep in run.record.after:
            path = Path(dep.get("path", ""))
            if (path / "run.json").is_file():
                targets[str(path)] = Run(path)
    found = dict(zip(targets, gather_many(list(targets.values()), live, follow=False)))
    return {run.path: waits_for(run.record.after, found) for run in waiting}


def gather_many(runs: list[Run], live: bool = True, follow: bool = True) -> list[RunStatus]:
    """The status of each run, in order: one scheduler query per backend for all of them, none
    for runs already known to have ended; follow: also the runs they wait for."""
    states: dict[Path, JobState] = {run.path: _recorded(run) for run in runs}
    if live:
        # One query per backend and cluster (runs submitted through a login node are asked there).
        by_backend: dict[tuple, list[Run]] = {}
        for run in runs:
            if run.record.final:
                continue
            if run.record.job_id is None and not _adopted(run, states):
                continue
            far = run.record.extra.get("remote") or run.record.extra.get("rest") or {}  # mappings
            # A REST run is asked through its site's own profile (for_run): one query per site.
            key = (run.record.backend, str(far.get("login") or far.get("url")), str(far.get("ssh")),
                   str(far.get("site")))
            by_backend.setdefault(key, []).append(run)
        for (name, *_), group in by_backend.items():
            try:
                answers = for_run(group[0]).states(group)
            except KeyError:
                for run in group:
                    states[run.path].reason = f"unknown backend '{name}' in run.json"
                continue
            except SchedulerError as exc:
                for run in group:  # keep the last known state, and say why it is not newer
                    states[run.path].reason = f"cannot reach {name}: {exc}"
                continue
            for run, state in zip(group, answers):
                states[run.path] = _keep(run, state)
    waits = _waiting(runs, states, live) if follow else {}
    return [_status(run, states[run.path], waits) for run in runs]


def gather(run: Run, live: bool = True) -> RunStatus:
    return gather_many([run], live)[0]


def with_evaluations(st: RunStatus) -> RunStatus:
    """The status with the run's evaluation records, read back bounded."""
    found, st.evaluation_problems = evaluations.read(Path(st.path))
    st.evaluations = evaluations.as_json(found)
    return st


def recent(limit: int = 20, live: bool = True) -> list[RunStatus]:
    """The newest runs in the index, newest first; a run whose files are damaged is shown with
    the reason instead of hiding the others."""
    runs, broken = [], {}
    for entry in reversed(indexed()[-limit:]):
        run = Run(Path(entry["path"]))
        try:
            run.record  # noqa: B018 (read to know it is readable)
            for_run(run)  # and that its backend and what it keeps for it are sound
            runs.append(run)
        except HpctrainError as exc:
            broken[run.path] = RunStatus(
                run_id=str(entry.get("run_id")), name=str(entry.get("name") or "?"),
                site=str(entry.get("site") or "?"), backend="?", job=str(entry.get("job_id")),
                path=str(run.path), submitted=entry.get("submitted"), nodes=0, ranks_per_node=0,
                state=JobState(State.UNKNOWN, reason=exc.what))
            runs.append(run)
    good = [r for r in runs if r.path not in broken]
    answers = dict(zip((r.path for r in good), gather_many(good, live)))
    return [broken.get(r.path) or answers[r.path] for r in runs]


def with_progress(run: Run, st: RunStatus) -> RunStatus:
    """The same status with the ranks' newest progress: files only, no scheduler query."""
    return msgspec.structs.replace(st, progress=of_run(str(run.path), run.record.array_size))


def poll_schedule(run: Run) -> tuple[float, float]:
    """(first, longest) seconds between two state queries of the run's backend (Backend.poll):
    a scheduler's back off; a local job's state is a file and a process, read at once."""
    try:
        return for_run(run).poll
    except KeyError:
        return 1.0, 30.0


def wait(run: Run, on_change=None, timeout: float | None = None, first_poll: float | None = None,
         max_poll: float | None = None, on_tick=None, tick: float = 1.0) -> RunStatus:
    """Follow the run until it reaches a final state; on_change(status) on every change of its
    state, and on_tick(status) (if given) every `tick` seconds with fresh progress.

    Polls of the scheduler back off from first_poll to max_poll seconds while nothing changes
    and start again at first_poll on a change: a job that runs for hours costs its scheduler
    one query per max_poll seconds, not one a second. Progress comes from the run directory's
    files between those queries.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    first, longest = poll_schedule(run)
    first_poll = first if first_poll is None else first_poll
    max_poll = longest if max_poll is None else max_poll
    last = None
    poll = first_poll
    while True:
        st = gather(run)
        key = (st.state.state, st.state.exit_code, st.state.nodes, tuple(sorted(st.state.counts.items())))
        if key != last:
            poll = first_poll
            if on_change:
                on_change(st)
        else:
            poll = min(max_poll, poll * 1.5)
        if on_tick:
            on_tick(st)
        last = key
        if st.state.done:
            return st
        if deadline is not None and time.monotonic() >= deadline:
            return st
        until = time.monotonic() + poll
        if deadline is not None:
            until = min(until, deadline)
        while (left := until - time.monotonic()) > 0:
            time.sleep(min(left, tick) if on_tick else left)
            if on_tick and until - time.monotonic() > 0:
                on_tick(with_progress(run, st))


def exit_status(st: RunStatus) -> int:
    """What `submit --wait` exits with: the job's own exit status; 1 when it failed without one."""
    if st.state.state == State.COMPLETED:
        return 0
    return st.state.exit_code if st.state.exit_code else 1


def waits_for(after: list[dict], statuses: dict) -> list[dict]:
    """What a run waits for, for `status`: each condition with its run's state now and whether
    it still can, already does, or can never hold."""
    out = []
    for dep in after:
        st = statuses.get(dep.get("path"))
        state = st.state.state.value if st is not None else "UNKNOWN"
        if st is None or not st.state.done:
            verdict = "waiting"
        else:
            ok = state == "COMPLETED"
            met = {"afterok": ok, "afternotok": not ok, "afterany": True}.get(dep["mode"], True)
            verdict = "met" if met else "never"
        out.append({"mode": dep["mode"], "run_id": dep.get("run_id"), "job": dep.get("job_id"),
                    "state": state, "verdict": verdict})
    return out

"""A submitted run from Python: its state, logs and results, and a way to stop it.

    h = hpctrain.submit_function(fn, job)    # or hpctrain.submit(job), or hpctrain.Handle("RUN")
    h.wait(timeout=300); h.result()          # rank 0's return value (function runs)
    h.status(); h.logs(rank=1); h.cancel(); h.run_dir
    h.progress(); h.plot()                   # how far it got, by rank; its curves as a PNG

status, wait and cancel are the CLI's own (follow/operate.py): a Handle shows what `hpctrain status`
shows. A failed run raises JobFailed naming the rank and node.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import HpctrainError
from ..runs.records import Run


class JobFailed(HpctrainError):
    """The job ran and failed: a rank raised, or the scheduler ended it without a result.

    rank/node: the first rank that failed (None when the job ended outside the ranks);
    remote_traceback: that rank's traceback text.
    """

    def __init__(self, what: str, where: str | None = None, fix: str | None = None, *,
                 rank: int | None = None, node: str | None = None, remote_traceback: str = ""):
        self.rank, self.node, self.remote_traceback = rank, node, remote_traceback
        super().__init__(what, where, fix)

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}\n\nremote traceback:\n{self.remote_traceback}" if self.remote_traceback else text


class Handle:
    """A submitted run: status, logs, cancel, wait, result, and its run directory.

    Handle(ref) finds a run submitted earlier (from Python or the CLI) by run id, run directory
    or job id; Handle() is the newest run.
    """

    def __init__(self, ref: "Run | str | os.PathLike | None" = None):
        from ..runs.records import find, latest
        if isinstance(ref, Run):
            self.run = ref
        elif ref is None:
            newest = latest()
            if newest is None:
                raise HpctrainError("no runs yet", fix="submit one first")
            self.run = newest
        else:
            self.run = find(str(ref))

    @property
    def run_dir(self) -> Path:
        return self.run.path

    @property
    def run_id(self) -> str:
        return self.run.id

    @property
    def job_id(self) -> str:
        return str(self.run.record.job_id)

    def __repr__(self) -> str:
        rec = self.run.record
        return (f"<hpctrain run {self.run_id} job {rec.job_id} on {rec.site} ({rec.kind}) "
                f"at {self.run_dir}>")

    # --- state: the CLI's path
    def status(self):
        """The run's JobState (state, exit code, nodes, elapsed, an array's tasks)."""
        from .operate import status
        return status(self.run).state

    def progress(self) -> list:
        """How far the training got: the run's (or each sweep task's) TrainingProgress, with
        each rank's in .ranks — what `hpctrain status --ranks` shows."""
        from .operate import status
        return status(self.run).progress

    def evaluations(self) -> list[dict]:
        """The run's evaluation records (`hpctrain eval`), by iteration, as `status --json`
        shows them; HpctrainError names a record that cannot be read."""
        from ..runs.evaluations import as_json, read
        found, problems = read(self.run.path)
        if problems:
            raise HpctrainError(f"{len(problems)} evaluation record(s) cannot be read: "
                                f"{problems[0]}", fix="restore or remove them (hpctrain eval "
                                "writes them again)")
        return as_json(found)

    def plot(self, metrics: list[str] | None = None, out: str | None = None) -> str:
        """Draw the run's training curves (as `hpctrain plot`); returns the PNG's path."""
        from .plot import plot
        return plot(self.run, metrics, out).path

    def done(self) -> bool:
        return self.status().done

    def wait(self, timeout: float | None = None):
        """Block until the job ends; return its final JobState. TimeoutError after `timeout` s."""
        from .status import wait
        st = wait(self.run, timeout=timeout)
        if not st.state.done:
            raise TimeoutError(f"run {self.run_id} (job {self.job_id}) still {st.state.state} "
                               f"after {timeout:.0f}s")
        return st.state

    def cancel(self) -> None:
        """Cancel the run, as `hpctrain cancel` does."""
        from .operate import cancel
        cancel(self.run)

    # --- results
    def results(self, timeout: float | None = None) -> list:
        """Every rank's return value, by rank (function runs); raises JobFailed as result()."""
        state = self.wait(timeout)
        rec = self.run.record
        if rec.kind != "function":
            return [self._command_result(state)]
        from ..backends.submitit import outcomes_of
        outcomes = outcomes_of(self.run)
        errors = {t: v for t, (o, v) in outcomes.items() if o == "error"}
        if errors:
            raise self._failure(errors)
        missing = [t for t in range(rec.ntasks) if t not in outcomes]
        if missing:
            raise JobFailed(f"the job ended {state.state} without a result from "
                            f"{'rank' if len(missing) == 1 else 'ranks'} "
                            f"{', '.join(map(str, missing))}" + (f" ({state.reason})" if state.reason else ""),
                            str(self.run_dir), "see handle.logs(); a time limit or a cancel ends "
                            "a job without results")
        return [outcomes[t][1] for t in range(rec.ntasks)]

    def result(self, timeout: float | None = None):
        """Rank 0's return value; for a job's own command, {"exit_code": 0, "job": ...}."""
        return self.results(timeout)[0]

    def _command_result(self, state) -> dict:
        if state.state == "COMPLETED":
            return {"exit_code": 0, "job": self.job_id, "run_dir": str(self.run_dir)}
        from ..rank.records import first_failure, read_rank_failures
        first = first_failure(read_rank_failures(str(self.run_dir)))
        if first is None:
            raise JobFailed(f"the job ended {state.state}" + (f" ({state.reason})" if state.reason
                            else ""), str(self.run_dir), "see handle.logs()")
        raise JobFailed(f"rank {first.rank} on {first.node} failed (exit status "
                        f"{first.exit_status}): {first.error}", str(self.run_dir),
                        f"the rank's log: {self.run_dir}/logs/rank-{first.rank}.log",
                        rank=first.rank, node=first.node)

    def _failure(self, errors: dict[int, Any]) -> JobFailed:
        from ..rank.records import read_rank_failures
        notes = {f.rank: f for f in read_rank_failures(str(self.run_dir))}
        failed = [t for t in errors if t in notes] or sorted(errors)
        rank = min(failed)
        note = notes.get(rank)
        what = f"rank {rank} on {note.node} raised {note.error}" if note else f"rank {rank} failed"
        return JobFailed(what, str(self.run_dir), f"its log: {self.run_dir}/logs/rank-{rank}.log",
                         rank=rank, node=note.node if note else None,
                         remote_traceback=str(errors[rank]))

    # --- logs
    def logs(self, rank: int | None = None) -> str:
        """One rank's log (logs/rank-R.log), or with rank=None the job's own output."""
        from .operate import logs
        out: list[str] = []
        logs(self.run, rank=rank, write=out.append)
        return "".join(out)

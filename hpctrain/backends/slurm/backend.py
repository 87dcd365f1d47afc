"""Slurm through its command-line tools: sbatch, squeue (scontrol, sacct as fallbacks), scancel.

Templates: templates/slurm/ (the batch script: one srun step that starts one torchrun per node,
the preemption trap and requeue from the batch shell).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec

from ...errors import HpctrainError
from ...runs.records import Run
from .. import commands
from ..base import Backend, JobState, State
from ..summary import fmt_elapsed, summarise
from .accounting import accounting_enabled

# Slurm's job states (squeue/scontrol/sacct words) in hpctrain's vocabulary.
SLURM_STATES = {
    "PENDING": State.PENDING, "CONFIGURING": State.PENDING, "REQUEUED": State.REQUEUED,
    "REQUEUE_HOLD": State.REQUEUED, "REQUEUE_FED": State.REQUEUED, "RESV_DEL_HOLD": State.PENDING,
    "RUNNING": State.RUNNING, "COMPLETING": State.RUNNING, "SIGNALING": State.RUNNING,
    "STAGE_OUT": State.RUNNING, "RESIZING": State.RUNNING, "UPDATE_DB": State.RUNNING,
    "SUSPENDED": State.SUSPENDED, "STOPPED": State.SUSPENDED,
    "COMPLETED": State.COMPLETED, "FAILED": State.FAILED, "SPECIAL_EXIT": State.FAILED,
    "CANCELLED": State.CANCELLED, "REVOKED": State.CANCELLED, "TIMEOUT": State.TIMEOUT,
    "DEADLINE": State.TIMEOUT, "PREEMPTED": State.PREEMPTED, "NODE_FAIL": State.NODE_FAIL,
    "BOOT_FAIL": State.NODE_FAIL, "OUT_OF_MEMORY": State.OUT_OF_MEMORY,
}


def _state(rec) -> JobState:  # rec: slurm_records.Record
    state = SLURM_STATES.get(rec.state, State.UNKNOWN)
    return JobState(state=state, raw=rec.state,
                    exit_code=rec.exit_code if state.done else None,
                    reason=rec.reason, nodes=rec.nodes, elapsed=fmt_elapsed(rec.elapsed()),
                    restarts=rec.restarts, job=rec.name, dependency=rec.dependency)


def _stopped_for_idle(run: Run, st: JobState) -> JobState:
    """A run the idle-GPU stop ended (rank/during/sampler.py; the batch shell exits 143, so Slurm says
    FAILED) is STOPPED, with what it saved: status/stopped.json, reason idle_gpus."""
    if st.state != State.FAILED or st.exit_code != 143:
        return st
    from ...runs.untrusted import read_regular
    try:
        rec = json.loads(read_regular(str(run.path / "status" / "stopped.json"), 65536))
    except (OSError, ValueError):
        return st
    if isinstance(rec, dict) and rec.get("reason") == "idle_gpus" and isinstance(rec.get("message"), str):
        st.state, st.reason = State.STOPPED, "stopped " + " ".join(rec["message"].split())[:500]
    return st


def directive_value(value: str) -> str:
    """A value as an `#SBATCH` line carries it: sbatch ends an unquoted value at a space or a
    `#` (measured on 22.05: `--comment=a#b c` became "a"), and reads double quotes itself.
    sbatch reads `'` as a quote too (`--comment=a'b` is refused, `--comment='x'` became x), but
    not inside double quotes. Values never hold `"` or `\\` (job/checks.py, job/sbatch_options.py)."""
    return f'"{value}"' if any(c in value for c in " #'") else value


class SlurmBackend(Backend):
    name = "slurm"
    script_name = "job.sbatch"
    preemption = True
    no_spares = ""  # nodes + spares allocated, --no-kill (templates/slurm/requeue.sh.j2)
    writes_directives = True
    container_runtimes = ("apptainer", "singularity", "pyxis", "podman", "docker")
    dependencies = True
    first_node = '$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
    studies = True

    def allocation_ref(self) -> str:
        env = os.environ  # (Slurm's own, in the job's environment)
        if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
            return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
        return env.get("SLURM_JOB_ID") or super().allocation_ref()

    def allocation_nodes(self) -> str:
        return os.environ.get("SLURM_JOB_NODELIST") or super().allocation_nodes()

    def allocation_restarts(self) -> int:
        count = os.environ.get("SLURM_RESTART_COUNT", "")
        return int(count) if count.isdigit() else 0

    def allocation_running(self, job_ref: str) -> bool:
        try:
            out = commands.run(["scontrol", "-o", "show", "job", job_ref])
        except commands.SchedulerError:
            return False
        return " JobState=RUNNING " in f" {out} "

    def allocation_end(self, job_ref: str) -> float | None:
        import datetime
        import re
        value = os.environ.get("SLURM_JOB_END_TIME", "")  # this job's own, where Slurm sets it
        if value.isdigit():
            return float(value)
        try:
            out = commands.run(["scontrol", "-o", "show", "job", job_ref])
        except commands.SchedulerError:
            return None
        found = re.search(r"\bEndTime=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\b", out)
        if not found:  # Unknown, or no limit
            return None
        return datetime.datetime.fromisoformat(found.group(1)).timestamp()  # the local time

    def requeue_allocation(self, job_ref: str) -> None:
        commands.run(["scontrol", "requeue", job_ref])

    def scheduler_version(self) -> str | None:
        from .detect import slurm_version
        try:
            return slurm_version(commands.run(["scontrol", "--version"], timeout=30))
        except commands.SchedulerError:
            return None

    def every_node(self, command: str) -> str | None:
        return ('srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" '
                f'--ntasks-per-node=1 --cpus-per-task=1 {command}')

    # `hpctrain shell`, `launch` and `attach` (interactive.py).
    shell_roots = ("shell.sh.j2", "launch.sh.j2")

    def shell_command(self, plan, rcfile: Path, record: Path) -> list[str]:
        from .interactive import shell_command
        return shell_command(plan, rcfile, record)

    def inside(self, job_id: str) -> bool:
        from .interactive import inside
        return inside(job_id)

    def attach_command(self, run: Run, node: str) -> list[str]:
        from ...runs.untrusted import job_container_tool
        from .interactive import attach_command
        return attach_command(str(run.record.job_id), node, str(run.path),
                              job_container_tool(run.path))

    def job_nodes(self, run: Run) -> list[str]:
        from .interactive import job_nodes
        return job_nodes(str(run.record.job_id))

    def on_nodes(self, run: Run, command: list[str]) -> str:
        from .interactive import on_nodes_command
        try:
            return commands.run(on_nodes_command(str(run.record.job_id), self.job_nodes(run),
                                                 command), timeout=60)
        except commands.SchedulerError as exc:
            raise HpctrainError(f"could not reach the nodes of run {run.id}: {exc.stderr or exc}",
                                fix=f"check that the job still runs: hpctrain status {run.id}") from None

    @classmethod
    def check_site(cls, site, doc) -> None:
        if site.rest is not None and (site.login is not None or "remote" in doc):
            raise HpctrainError("'rest' and 'login' are two ways into the cluster; a site takes "
                                "one", doc.where(("rest",)), "remove rest: (submit over ssh) or "
                                "login:/remote: (submit through slurmrestd)")
        if site.rest is not None:
            from . import restapi
            restapi.check_section(site, doc)
        # Only a site that mentions a login node pays for importing the ssh side: every
        # command (render included) loads a site.
        if site.login is None and not any(key in doc for key in ("remote", "ssh")):
            return
        from . import login as remote
        remote.check_site(site, doc)

    @classmethod
    def check_job(cls, spec, site, where) -> list[str]:
        if site.login is None:
            return []
        from ..ssh import openssh  # only a site with a login node reads its ssh: section
        return openssh.site_notes(site, where)

    def header(self, directives: list[tuple[str, str | None]]) -> list[str]:
        return [f"#SBATCH --{k}" if v is None else f"#SBATCH --{k}={directive_value(v)}"
                for k, v in directives]

    job_id_pattern = r"[0-9]{1,12}"  # what sbatch --parsable answers (before a ';cluster')

    def submit_command(self, script: Path, plan=None) -> list[str]:
        return ["sbatch", "--parsable", str(script)]

    def submit(self, run: Run, prep) -> str:
        try:
            out = commands.run(self.submit_command(prep.run_dir / prep.script_name))
        except commands.SchedulerError as exc:
            raise HpctrainError(f"sbatch refused the job: {exc.stderr or exc}",
                                fix="check partition/account/qos/time against `sinfo` and the site "
                                "profile; `hpctrain submit --dry-run` shows the script") from None
        return out.strip().split(";")[0]

    def resubmit(self, run: Run, exclude: list[str]) -> str:
        cmd = ["sbatch", "--parsable"]
        if exclude:
            cmd.append(f"--exclude={','.join(exclude)}")
        try:
            out = commands.run([*cmd, str(run.path / self.script_name)])
        except commands.SchedulerError as exc:
            raise HpctrainError(f"sbatch refused the resumed job: {exc.stderr or exc}",
                                fix="check the nodes left out (`hpctrain status RUN`) against "
                                "`sinfo`; the run's script is " + str(run.path / self.script_name)
                                ) from None
        return out.strip().split(";")[0]

    def collisions(self, plan) -> list[str]:
        """A maintenance reservation on the job's partition that its time limit runs into
        (reservations.py): a warning with the longest time that fits, or refused when the job
        can never start. Nothing when scontrol cannot be asked: sbatch then says why."""
        from ...schema.spec import slurm_seconds
        from . import reservations
        d = dict(plan.directives)
        if d.get("reservation"):
            return []  # a job in a reservation of its own runs inside it
        try:
            found = reservations.parse(commands.run(["scontrol", "-o", "show", "reservation"]))
            if not any(r.maint for r in found):
                return []
            _, nodes = reservations.partition_nodes(d.get("partition"))
        except commands.SchedulerError:
            return []
        try:
            limit = slurm_seconds(d.get("time") or "")
            needed = int(d.get("nodes") or "1")
        except ValueError:
            return []
        hit = reservations.collision(found, nodes, needed, limit)
        if hit is None:
            return []
        if hit.never:
            raise HpctrainError(hit.text, fix="ask the cluster's administrators when the nodes are "
                                "free for this long, or lower resources.time (and checkpoint)")
        return [hit.text]

    def test_start(self, script: str) -> str | None:
        """`sbatch --test-only`'s answer ("Job 12 to start at ... on nodes ... in partition
        ..."), the script given on stdin: nothing is queued."""
        from .pending import clean, start_line
        try:
            out = commands.run(["bash", "-c", "exec sbatch --test-only 2>&1", "hpctrain"],
                               input=script, timeout=30)
        except commands.SchedulerError as exc:
            if exc.status in (None, 127):  # no Slurm here: nothing to say
                return None
            return f"sbatch --test-only refused it: {clean(exc.stderr or exc.what, 300)}"
        return start_line(out)

    # ------------------------------------------------------------------------------ state

    def accounting(self, job_ids: list[str], since: float | None = None) -> list[dict] | None:
        from .accounting import accounting
        return accounting(job_ids, since)

    def states(self, runs: list[Run]) -> list[JobState]:
        from . import records as slurm_records
        ids = [str(r.record.job_id) for r in runs]
        records = self._query(ids)
        missing = [i for i in ids if not any(slurm_records.belongs(r, i) for r in records)]
        if missing and accounting_enabled():
            records += slurm_records.parse_sacct(commands.run(
                ["sacct", "-X", "-P", "-n", "-o", slurm_records.SACCT_FIELDS,
                 "-j", ",".join(missing)]))
        answers = [self.state_of(run, [r for r in records if slurm_records.belongs(r, str(run.record.job_id))
                                      or r.job_id.split("_")[0] == str(run.record.job_id)])
                   for run in runs]
        _explain(answers, records)
        return answers

    @staticmethod
    def _query(ids: list[str]):
        """Every job record slurmctld holds for these ids, in ONE request whatever their number.
        squeue's job filter is passed for the releases that honour it (22.05 returns the whole
        queue with --json anyway; the records are filtered here)."""
        from . import records as slurm_records
        command = ["squeue", "--json", "--all", "--states=all", f"--jobs={','.join(ids)}"]
        try:
            text = commands.run(command)
        except commands.SchedulerError as exc:
            if exc.status is None or "Invalid job id" in exc.stderr:
                raise
            # A release without --json: scontrol's one-line records, all jobs in one request.
            return slurm_records.parse_scontrol(commands.run(["scontrol", "-o", "show", "job"]))
        # squeue --json exits 0 when the controller cannot be reached, and says so inside.
        errors = slurm_records.squeue_errors(text)
        if errors:
            raise commands.SchedulerError(command, 0, "; ".join(errors))
        return slurm_records.parse_squeue_json(text)

    @staticmethod
    def state_of(run: Run, records) -> JobState:
        """A run's state from the scheduler's records of its job (squeue's, scontrol's, sacct's
        or slurmrestd's, already parsed): an array's from every task's. The REST backend asks
        the same question of its own records."""
        rec = run.record
        job_id = str(rec.job_id)
        # A study's workers are an array too (run.json parallel; no array_size: it is no sweep).
        # Its state is every worker's, not that of the task that happens to carry the array's id:
        # one worker that ended early must not make `status` say COMPLETED and `cancel` a no-op.
        size = rec.array_size or ((rec.parallel or 0) if rec.kind == "study" else 0)
        if not size:
            mine = next((r for r in records if r.job_id == job_id), None)
            if mine is None:
                return JobState(State.UNKNOWN, job=job_id,
                                reason="Slurm no longer remembers this job (it ended more than "
                                "MinJobAge ago and the cluster keeps no accounting)")
            return _stopped_for_idle(run, _state(mine))
        # Each task's record, the first that names it, found in one pass, and a pending
        # record's state made once: not a scan of the records, nor a name of all its tasks,
        # per task (an array of 100,000 pending tasks took minutes).
        done_of: dict[int, object] = {}
        pending_of: dict[int, object] = {}
        for r in records:
            if r.task is not None:
                done_of.setdefault(r.task, r)
            for i in r.pending_tasks:
                pending_of.setdefault(i, r)
        waiting: dict[int, JobState] = {}
        tasks = []
        for i in range(size):
            done, pending = done_of.get(i), pending_of.get(i)
            if done is not None:
                tasks.append(_state(done))
            elif pending is not None:
                if id(pending) not in waiting:
                    waiting[id(pending)] = _state(pending)
                tasks.append(msgspec.structs.replace(waiting[id(pending)], job=f"{job_id}_{i}",
                                                     exit_code=None, elapsed=None))
            else:
                # A pending task that was cancelled leaves no record at all.
                tasks.append(JobState(State.CANCELLED if rec.cancelled else State.UNKNOWN,
                                      job=f"{job_id}_{i}"))
        return summarise(job_id, tasks)

    def adopt(self, run: Run) -> str | None:
        """The job whose output file lies in this run's logs/ (every job script names it)."""
        from . import records as slurm_records
        command = ["squeue", "--json", "--all", "--states=all"]
        text = commands.run(command)
        errors = slurm_records.squeue_errors(text)
        if errors:
            raise commands.SchedulerError(command, 0, "; ".join(errors))
        mine = f"{run.path}/logs/"
        for rec in slurm_records.parse_squeue_json(text):
            if rec.stdout and rec.stdout.startswith(mine):
                return rec.array_job_id or rec.job_id
        return None

    # ------------------------------------------------------------------------------ control

    def cancel(self, run: Run) -> None:
        self.abort(str(run.record.job_id))  # the array's id cancels every task

    def abort(self, job_id: str) -> None:
        commands.run(["scancel", str(job_id)])

    def output_files(self, run: Run, task: int | None = None) -> list[Path]:
        # An array task's batch output lies in the array's logs/ (Slurm names it), not in tasks/<i>/.
        pattern = f"logs/slurm-*_{task}.out" if task is not None else "logs/slurm-*.out"
        return sorted(run.path.glob(pattern), key=_task_order)


def _explain(answers: list[JobState], records) -> None:
    """Say why each pending job (or an array's pending tasks) waits: JobState.why, from a few
    more queries asked only while one does (pending.py). A query that fails leaves Slurm's own
    reason, which describe() shows as before."""
    from . import pending
    waiting: dict[str, JobState] = {}
    for state in answers:
        # An array's pending tasks wait for the same reason: its first one speaks for them.
        one = next((t for t in state.tasks if t.state == State.PENDING), None) \
            if state.tasks else state
        if one is not None and one.state == State.PENDING and one.job:
            waiting.setdefault(one.job, one)
    if not waiting:
        return
    asked = []
    for name in waiting:
        base = name.split("_")[0]
        rec = next((r for r in records if r.name == name), None) or next(
            (r for r in records if r.array_job_id == base and r.pending_tasks), None)
        asked.append({"job": name, "reason": waiting[name].reason,
                      "partition": rec.partition if rec else None, "qos": rec.qos if rec else None,
                      "user": rec.user if rec else None,
                      "reservation": rec.reservation if rec else None})
    try:
        whys = pending.explain(asked)
    except commands.SchedulerError:
        return
    for name, one in waiting.items():
        one.why = whys.get(name)
    for state in answers:
        if state.state == State.PENDING and state.tasks:
            state.why = next((t.why for t in state.tasks if t.why), None)


def _task_order(path: Path) -> tuple:
    tail = path.stem.rsplit("_", 1)[-1]
    return (int(tail) if tail.isdigit() else -1, path.stat().st_mtime if path.exists() else 0)

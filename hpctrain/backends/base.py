"""The base class every backend implements, and the one state vocabulary they all report in.

A backend is where a rendered job goes and who answers for it afterwards: it owns the syntax of
the script's header (Slurm's `#SBATCH` lines), the script's name, how it is submitted, how its
state is asked for (many runs in one query), how it is cancelled, and where its output lands.
Everything scheduler-specific lives in its module and its template folder (templates/<name>/);
see backends/__init__.py for the registry and how to add one.
"""
from __future__ import annotations

import abc
import os
from enum import Enum
from pathlib import Path
from typing import ClassVar

import msgspec

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..runs.records import Run


class State(str, Enum):
    """A job's state, the same words whatever ran it. Each backend maps its scheduler's own
    states onto these (Slurm: backends/slurm/backend.py SLURM_STATES); the original word is kept in
    JobState.raw."""
    PENDING = "PENDING"  # queued, waiting for resources or a dependency
    REQUEUED = "REQUEUED"  # ended and queued again (preemption, a requeue)
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETED = "COMPLETED"  # ended with exit status 0
    FAILED = "FAILED"  # ended with a non-zero status
    CANCELLED = "CANCELLED"  # by the user (or an administrator)
    # Ended on a signal sent to the job itself (no scheduler: a `kill`, a shutdown, a closed
    # session), its ranks having saved what they could: `submit --resume` continues it.
    STOPPED = "STOPPED"
    TIMEOUT = "TIMEOUT"  # reached its time limit
    PREEMPTED = "PREEMPTED"  # preempted and not requeued
    NODE_FAIL = "NODE_FAIL"  # a node failed under it
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    LOST = "LOST"  # its process is gone without saying how it ended
    UNKNOWN = "UNKNOWN"  # the scheduler no longer knows it, or cannot be asked

    @property
    def done(self) -> bool:
        return self in _FINAL

    def __str__(self) -> str:
        return self.value


_FINAL = {State.COMPLETED, State.FAILED, State.CANCELLED, State.STOPPED, State.TIMEOUT, State.PREEMPTED,
          State.NODE_FAIL, State.OUT_OF_MEMORY, State.LOST}


class JobState(msgspec.Struct):
    state: State
    exit_code: int | None = None
    reason: str | None = None  # why pending, or why it failed
    nodes: str | None = None
    elapsed: str | None = None
    restarts: int = 0
    raw: str | None = None  # the scheduler's own word for the state
    job: str | None = None  # the scheduler's name for it: 1234, 1234_5, local-4321
    tasks: list["JobState"] = msgspec.field(default_factory=list)  # an array's tasks, by index
    counts: dict = msgspec.field(default_factory=dict)  # an array's tasks per state
    dependency: str | None = None  # what the scheduler holds it for: afterok:12(unfulfilled)
    # Why a pending job waits, where the scheduler can tell (backends/slurm/pending.py):
    # {category, reason, text, action, ahead, estimate, ...}; None when not pending or not known.
    why: dict | None = None

    @property
    def done(self) -> bool:
        return self.state.done


class JobGpus(msgspec.Struct, frozen=True):
    """Where a job's GPUs are and what they are (Backend.job_gpus)."""
    place: str  # as an error names it: "partition 'gpu'", "this machine", "host ws1"
    names: list[str]  # the GPU models there, GRES types or nvidia-smi's names; [] unknown
    source: str  # how that was learned (the site's key, nvidia-smi's answer, or why not)
    fix: str = "run it on a site whose GPUs render (--site NAME: L40S, L4, A10, A40 or RTX GPUs)"


class Backend(abc.ABC):
    """One scheduler (or none). Subclasses set the class attributes and implement the methods;
    instantiating one that misses a method fails at once (abc), not at its first use."""

    name: ClassVar[str]
    script_name: ClassVar[str]  # the job script's file name in the run directory
    # What the scheduler can do for a job, which the plan and the checks ask instead of its name.
    max_nodes: ClassVar[int | None] = None  # None: as many as the site allows
    preemption: ClassVar[bool] = False  # signals ahead of the time limit, and requeue
    # Why resources.spare_nodes cannot work here; "" where the batch shell swaps in spares.
    no_spares: ClassVar[str] = "only a Slurm allocation holds spare nodes"
    # How often `submit --wait` and Handle.wait() ask for the state: (first, longest) seconds;
    # the interval grows from the first to the longest while nothing changes (follow/status.py).
    poll: ClassVar[tuple[float, float]] = (1.0, 30.0)
    runs_here: ClassVar[bool] = False  # the job runs on this machine (its GPUs are checked at submit)
    writes_directives: ClassVar[bool] = False  # the script's header holds scheduler directives
    # Container runtimes (containers.RUNTIMES) this backend's scripts can start the ranks in.
    container_runtimes: ClassVar[tuple[str, ...]] = ()
    dependencies: ClassVar[bool] = False  # holds a job until other jobs ended (job/chains.py)
    # Shell text, in the batch script, naming the allocation's first node (doctor.py); None: the
    # scheduler runs one node only.
    first_node: ClassVar[str | None] = None
    # A study's workers (hpctrain/search/) can run here: each owns an allocation of the job's
    # shape and starts one trial after another in it.
    studies: ClassVar[bool] = False

    def allocation_ref(self) -> str:
        """Inside a job: this allocation's id, stable across its requeues (a study's worker
        marks the trial it runs with it, and finds that trial again after a requeue). Without a
        scheduler: the process that started this one."""
        return f"local-{os.getppid()}"

    def allocation_nodes(self) -> str:
        """Inside a job: its nodes, as the scheduler writes a node list."""
        return os.uname().nodename

    def allocation_restarts(self) -> int:
        """Inside a job: how many times it was requeued so far (preemption.max_requeues)."""
        return 0

    def allocation_running(self, job_ref: str) -> bool:
        """Inside a job: whether the scheduler still runs it (not cancelled, timed out or
        already requeued): a worker signalled then requeues it (requeue_allocation)."""
        return False

    def allocation_end(self, job_ref: str) -> float | None:
        """Inside a job: when its time limit ends it (epoch seconds); None: no limit known."""
        return None

    def requeue_allocation(self, job_ref: str) -> None:
        """Inside a job: queue it again (its next run resumes the study's trial it held)."""

    def scheduler_version(self) -> str | None:
        """The scheduler's release as its own tools say it now (doctor prints it); None where
        there is none or it cannot be told."""
        return None

    def every_node(self, command: str) -> str | None:
        """A batch-script line running `command` once on every node of the allocation, its
        output reaching the batch shell (doctor.py); None where the scheduler has one node."""
        return None

    # How the script reaches every node and which node is the head, as `hpctrain validate` says it.
    step_launcher: ClassVar[str] = "srun 1 task/node"
    head_node: ClassVar[str] = "first node of the allocation"

    # Hooks for what only this scheduler reads or needs (the ssh backend's hosts, say); the
    # shared stages call them without asking which scheduler a job uses.
    @classmethod
    def check_site(cls, site, doc) -> None:
        """Check the site-profile keys only this scheduler reads (checks.check_site); raise
        HpctrainError with doc.where(key path)."""

    @classmethod
    def check_job(cls, spec, site, where) -> list[str]:
        """What only this scheduler requires of a job on its site (checks.check): raise
        HpctrainError with where(key path), return warnings."""
        return []

    @classmethod
    def waits_for(cls, scheduler: str) -> bool:
        """Whether a job of this scheduler can wait for a run recorded under `scheduler`
        (job/chains.py): only for its own, whose job ids its dependencies name."""
        return cls.dependencies and scheduler == cls.name

    # The scheduler's job ids, as run.json and `after:` carry them (job/chains.py puts one in a
    # directive): a strict full-match pattern; the default is runs/untrusted.JOB_ID's.
    job_id_pattern: ClassVar[str] = r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}"

    @classmethod
    def job_gpus(cls, job) -> "JobGpus":
        """The GPU models a job would run on, for its video: (job/video.py): by default the
        site profile's, for the partition the job names (its gpu_type when the request pins
        one, else gpu_models: SiteProfile.gpu_models_on), and a partition of the site whose
        GPUs all render."""
        from ..rank.before.gpu_models import verdicts
        site, part = job.site, job.spec.resources.partition
        place = f"partition '{part}'" if part else "the default partition (the job names none)"
        able = [p for p, models in site.gpu_models.items() if p != part and verdicts(models)[0]]
        fix = (f"send it to partition '{able[0]}', whose GPUs render ({', '.join(site.gpu_models[able[0]])}): "
               f"--set resources.partition={able[0]}" if able else
               f"no partition of site '{site.name}' has GPUs known to render (the site's "
               "gpu_models, which hpctrain site detect writes from sinfo): name them there "
               "(e.g. gpu_models: {viz: [l40s]}), or run it on a site with L40S, L4, A10, A40 "
               "or RTX GPUs")
        models = site.gpu_models_on(part)
        said = (f"the site's gpu_models say {part}: {', '.join(site.gpu_models[part])}"
                if part in site.gpu_models else
                f"the site's gpu_type asks for {site.gpu_type}" if site.gpu_type else
                f"the site's gpu_models name no GPU model for {place}" if part else
                "the job names no partition")
        return JobGpus(place, models, said, fix)

    @classmethod
    def check_record(cls, run: Run) -> None:
        """Check what only this scheduler keeps in run.json (the ssh backend's hosts and ssh
        command line): raise HpctrainError naming the file and the key. backends.for_run calls
        it before the backend answers for the run."""

    @classmethod
    def plan_values(cls, job) -> dict:
        """Plain values only this scheduler's templates use: LaunchPlan.scheduler."""
        return {}

    # Interactive use (hpctrain/interactive.py: `hpctrain shell` and `launch`; follow/attach.py:
    # `attach`). shell_roots: the templates of this scheduler's folder that render the shell's
    # rcfile and its launch (None: the scheduler has no interactive allocation).
    shell_roots: ClassVar[tuple[str, str] | None] = None
    # Whether the shell command can hand the job's secrets on (from this process's environment):
    # not where its standard input is the terminal and its environment stays here (ssh).
    shell_takes_secrets: ClassVar[bool] = True

    def stage(self, run: Run, prep) -> None:
        """Before the shell command: what the run needs where the shell runs (copies, records)."""

    def shell_record(self, run: Run) -> dict:
        """run.json fields for the shell once its id is recorded (status finds it by them)."""
        return {}

    def shell_command(self, plan, rcfile: Path, record: Path) -> list[str]:
        """The command that gets an allocation with the plan's resources and directives and
        runs `bash --rcfile RCFILE -i` on its first node, having written the allocation's id to
        RECORD; it releases the allocation when the shell ends or the command is hung up."""
        raise self.no_interactive("hpctrain shell")

    def inside(self, job_id: str) -> bool:
        """Whether this process runs inside that job's allocation (`hpctrain launch`)."""
        return False

    def attach_command(self, run: Run, node: str) -> list[str]:
        """An interactive shell on that node of the run's running job, beside its ranks."""
        raise self.no_interactive("hpctrain attach")

    def job_nodes(self, run: Run) -> list[str]:
        """The nodes the run's job runs on now, first node first ([] when it runs nowhere)."""
        raise self.no_interactive("hpctrain attach")

    def on_nodes(self, run: Run, command: list[str]) -> str:
        """Run `command` once on every node of the run's running job, beside its ranks; its
        output. HpctrainError when a node cannot be reached."""
        raise self.no_interactive("hpctrain attach --stacks")

    def no_interactive(self, what: str):
        """The error for a command (`what`) that needs an interactive allocation, on a backend
        that cannot give one."""
        from ..errors import HpctrainError
        return HpctrainError(f"{what}: the {self.name} backend has no interactive allocation",
                             fix="a site whose scheduler is slurm, ssh or local, "
                             "--site SITE; or submit the job: hpctrain submit JOB")

    def fetch(self, run: Run) -> None:
        """Bring the run's files here where its nodes keep them (`logs` calls this first)."""

    def refresh(self, run: Run) -> str | None:
        """While `logs -f` follows the run: bring what grew here, if anything must be; return a
        note for the user (a lost connection, a reconnection) or None. Never raises."""
        return None

    def header(self, directives: list[tuple[str, str | None]]) -> list[str]:
        """The script's header lines for the plan's directive table ("#SBATCH --nodes=2")."""
        return []

    @abc.abstractmethod
    def submit_command(self, script: Path, plan=None) -> list[str]:
        """The command line that submits the script (what --dry-run shows); plan: its
        LaunchPlan, for a scheduler that submits to a host the plan names."""

    @abc.abstractmethod
    def submit(self, run: Run, prep) -> str:
        """Submit a prepared job (submission.Prepared) whose run directory is written; return
        the job id. Raise HpctrainError with the scheduler's message."""

    @abc.abstractmethod
    def states(self, runs: list[Run]) -> list[JobState]:
        """The state of each run, in order, asked of the scheduler in as few queries as it
        allows (one for any number of runs). Raises SchedulerError when it cannot be asked."""

    def state(self, run: Run) -> JobState:
        return self.states([run])[0]

    def adopt(self, run: Run) -> str | None:
        """The job of a run whose submit was killed before it recorded the job id, found by
        what the job carries of its run directory; None when no job was started."""
        return None

    def resubmit(self, run: Run, exclude: list[str]) -> str:
        """Submit the run's job script again, in the same run directory (`submit --resume`),
        leaving the named nodes out; return the new job id."""
        from ..errors import HpctrainError
        raise HpctrainError(f"the {self.name} backend cannot start a run again",
                            fix="submit the job file again (a new run)")

    def collisions(self, plan) -> list[str]:
        """Before a submit (and --dry-run), what the scheduler's calendar says against the job
        (a maintenance its time limit runs into): warnings; HpctrainError when it can never
        start. Asked where the scheduler's tools run; [] when they cannot be asked."""
        return []

    def accounting(self, job_ids: list[str], since: float | None = None) -> list[dict] | None:
        """`hpctrain report`: what the scheduler's accounting says every attempt of these jobs
        (a requeued job's too) was allocated and used, one dict per attempt {job_id, attempt,
        state, start, end, elapsed_s, gpus, cpus, total_cpu_s, max_rss_mib}, leaving out jobs
        submitted before `since`; None where it keeps none (then the run's own records answer)."""
        return None

    def test_start(self, script: str) -> str | None:
        """`submit --dry-run`: where and when the scheduler would start this script, without
        submitting it; None where it cannot say."""
        return None

    @abc.abstractmethod
    def cancel(self, run: Run) -> None:
        """Cancel the run (every task of an array)."""

    @abc.abstractmethod
    def abort(self, job_id: str) -> None:
        """Cancel by id alone: for a job whose run could not be recorded."""

    @abc.abstractmethod
    def output_files(self, run: Run, task: int | None = None) -> list[Path]:
        """The job's own output (the batch script and the ranks' prefixed lines), oldest first;
        with a task: that sweep task's."""


def preemption_directives(pre: dict | None) -> list[tuple[str, str | None]]:
    """The directive-table entries that ask for the preemption signal and make the job
    requeueable (pre: the plan's preemption settings, job/preemption.py)."""
    if pre is None:
        return []
    out: list[tuple[str, str | None]] = [("signal", f"B:{pre['signal']}@{pre['lead_time']}")]
    if pre["requeue"]:
        out.append(("requeue", None))
    return out

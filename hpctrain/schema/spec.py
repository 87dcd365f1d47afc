"""The job model: what a job file and a site profile may say, merged and validated.

One schema (msgspec Structs) checks job files and site profiles. msgspec rather than pydantic
because `hpctrain render` must start in well under 0.2 s: pydantic's import plus model build
costs ~0.1 s, msgspec's ~0.015 s, with the same strictness (unknown keys, types, bounds).
Merging order: site defaults < job file < `--set key.path=value`.

Every field carries its one-line meaning beside it, `Annotated[T, Meta(description=...)]`: the
manual's job.yaml and site-profile references are generated from these (scripts/gen-reference.py),
and tests/unit/test_reference.py fails while a field has none or a page is out of date.
"""

import os
import re
from typing import Annotated, Any, Literal, Union

import msgspec
from msgspec import Meta, Struct, field

from ..errors import HpctrainError, did_you_mean
from .yamlfile import Located

# Patterns are full-match and ASCII: \Z, not $ (which also matches before a final newline), and
# [0-9], not \d (which also matches other scripts' digits).
# A name becomes a directory (runs/<name>/): never "." or "..".
NAME_PATTERN = r"^(?!\.\.?\Z)[A-Za-z0-9_.-]+\Z"  # also what run.json's names are held to
Name = Annotated[str, Meta(pattern=NAME_PATTERN, max_length=100)]
EnvName = Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*\Z")]
EnvValue = Union[str, int, float, bool]
# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
SlurmTime = Annotated[str, Meta(pattern=r"^([0-9]+-[0-9]+(:[0-9]+){0,2}|[0-9]+(:[0-9]+){0,2})\Z")]
Memory = Annotated[str, Meta(pattern=r"^[0-9]+[KMGT]?\Z")]
# Upper bounds: a duration reaches time.sleep, select/poll and subprocess timeouts, which take at
# most 2^31 ms (24.8 days; Python raises OverflowError beyond), and a count reaches range() and
# the run record (runs/untrusted.py holds nodes to 100000, ranks per node to 4096). A value
# beyond them is refused at load, with its file:line, instead of failing every node later.
MAX_SECONDS = 2_000_000  # 23 days
MAX_COUNT = 1_000_000
Count = Annotated[int, Meta(ge=1, le=MAX_COUNT)]
NonNeg = Annotated[int, Meta(ge=0, le=MAX_COUNT)]
Seconds = Annotated[int, Meta(ge=1, le=MAX_SECONDS)]
Release = Annotated[str, Meta(pattern=r"^[0-9]+(\.[0-9]+){0,3}([.+-]?[A-Za-z0-9]+){0,4}\Z", max_length=40)]
Duration = Annotated[str, Meta(pattern=r"^[0-9]{1,7}(s|m|h)\Z")]  # 90s, 20m, 1h
MAX_VIDEO_LENGTH, MAX_VIDEO_COUNT = 2000, 20  # a 2000-step clip of 720p frames is ~5.5 GB in memory
# A partition's name and a GPU model as a site names them (a GRES type or nvidia-smi's name).
Partition = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}\Z")]
GpuModel = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_. -]{1,64}\Z")]


class _Strict(Struct, forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
    pass


class Resources(_Strict):
    nodes: Annotated[Annotated[int, Meta(ge=1, le=100_000)], Meta(description=(
            "nodes of the job; one torchrun on each"))] = 1
    spare_nodes: Annotated[Annotated[int, Meta(ge=0, le=64)], Meta(description=(
            "idle nodes beside `nodes` in the same allocation (Slurm), or the hosts "
            "after the job's (ssh): a node a failure blames is replaced by one at "
            "once, without a requeue; each costs its time like a working node"))] = 0
    gpus_per_node: Annotated[Annotated[int, Meta(ge=0, le=4096)], Meta(description=(
            "GPUs per node; every rank sees all of them and the bootstrap pins "
            "cuda:LOCAL_RANK"))] = 0
    procs_per_node: Annotated[Annotated[int, Meta(ge=1, le=4096)] | None, Meta(description=(
            "ranks per node; null: gpus_per_node, or 1 without GPUs"))] = None
    cpus_per_proc: Annotated[Count | None, Meta(description=(
            "CPUs per rank (--cpus-per-task = ranks x this); null: the library's "
            "need (Isaac Lab: 8), else 1"))] = None
    mem: Annotated[Memory | None, Meta(description=(
            "memory per node, Slurm's --mem (not with mem_per_cpu); null: the "
            "site's"))] = None
    mem_per_cpu: Annotated[Memory | None, Meta(description=(
            "memory per CPU, Slurm's --mem-per-cpu (not with mem); null: the "
            "library's need (Isaac Lab: 4048M), else the site's"))] = None
    time: Annotated[SlurmTime, Meta(description=(
            "time limit in Slurm's format: M, M:S, H:M:S, D-H, D-H:M or D-H:M:S"))] = "01:00:00"
    partition: Annotated[str | None, Meta(description=(
            "Slurm partition; null: the site's default"))] = None
    account: Annotated[str | None, Meta(description="Slurm account to charge")] = None
    qos: Annotated[str | None, Meta(description="Slurm quality of service")] = None
    constraint: Annotated[str | None, Meta(description=(
            "Slurm node features (--constraint), e.g. gpu"))] = None
    exclusive: Annotated[bool, Meta(description="whole nodes for this job (--exclusive)")] = False


class Launcher(_Strict):
    """How torchrun runs the ranks; timeouts in seconds, None = sized to the job."""
    max_restarts: Annotated[NonNeg, Meta(description=(
            "torchrun restarts of the whole worker group inside one allocation; "
            "the ranks resume from the newest checkpoint"))] = 0
    join_timeout: Annotated[Seconds | None, Meta(description=(
            "seconds for all nodes to join the c10d rendezvous; null: 600, 1200 "
            "above 64 nodes"))] = None
    last_call_timeout: Annotated[Seconds | None, Meta(description=(
            "seconds of grace for late nodes once the minimum joined; null: 30, "
            "120 above 64 nodes"))] = None
    close_timeout: Annotated[Seconds | None, Meta(description=(
            "seconds before a closed rendezvous gives up on stragglers; null: 60"))] = None
    collective_timeout: Annotated[Seconds | None, Meta(description=(
            "default timeout in seconds of every process group (NCCL/gloo) "
            "collective; null: torch's"))] = None
    monitor_interval: Annotated[Annotated[float, Meta(gt=0, le=3600)] | None, Meta(description=(
            "seconds between torchrun's checks on its worker processes; null: "
            "torchrun's"))] = None
    preflight: Annotated[bool | None, Meta(description=(
            "check before training that every node reaches the head and every "
            "rank meets the others; null: on for multi-node jobs"))] = None
    preflight_timeout: Annotated[Seconds | None, Meta(description=(
            "seconds for every node to reach the head, and every rank the rank "
            "check; null: 60"))] = None
    hang_timeout: Annotated[Seconds | None, Meta(description=(
            "seconds without progress from any rank before the ranks are ended, "
            "restarted or requeued; null: no hang detection"))] = None


class Preemption(_Strict):
    """What happens ahead of the time limit or on preemption (see hpctrain/job/preemption.py); on
    schedulers without preemption (this machine) these settings do nothing."""
    enabled: Annotated[bool, Meta(description=(
            "false: no --signal/--requeue, the job simply ends at its limit"))] = True
    signal: Annotated[Literal["USR1", "USR2", "TERM", "INT", "HUP", "URG"], Meta(description=(
            "the signal Slurm sends lead_time seconds before the limit "
            "(--signal=B:SIG@lead_time); the ranks save on it"))] = "USR2"
    lead_time: Annotated[Seconds, Meta(description=(
            "seconds before the time limit that Slurm sends the signal"))] = 120
    grace: Annotated[Seconds, Meta(description=(
            "seconds the ranks get to save after the signal"))] = 90
    requeue: Annotated[bool, Meta(description=(
            "requeue the job from the batch shell after a save (preemption, time "
            "limit ahead)"))] = True
    max_requeues: Annotated[NonNeg, Meta(description=(
            "most requeues, compared with SLURM_RESTART_COUNT (requeues of any "
            "cause)"))] = 3
    # A requeue after a failure that names a node (preflight, hang, a node's hardware error)
    # leaves that node out; never more than this many in all (rank/end/recovery.py).
    max_excluded_nodes: Annotated[NonNeg, Meta(description=(
            "most nodes a requeue (or submit --resume) leaves out because a "
            "failure named them, in all"))] = 2


class Snapshot(_Strict):
    """The copy of the code the job runs, made at submit (hpctrain/runs/snapshot.py)."""
    enabled: Annotated[bool, Meta(description=(
            "run a copy of the code taken at submit (RUN_DIR/code); false: the "
            "live tree"))] = True
    max_mb: Annotated[Annotated[int, Meta(ge=1, le=100_000)], Meta(description=(
            "a bigger copy is refused at submit"))] = 200
    exclude: Annotated[list[str], Meta(description=(
            "gitignore-style patterns left out of the copy (beside .gitignore's "
            "and .hpctrainignore's)"))] = []


# A per-job scheduler option's value: text, a number, true for a flag (false/null: left out), or
# a list joined with commas (mail-type: [END, FAIL]). job/checks.py holds it to what a directive can carry.
OptionValue = Union[str, int, bool, list[Union[str, int]], None]
Runtime = Literal["apptainer", "singularity", "pyxis", "podman", "docker"]


class Container(_Strict):
    """Each node's launch runs in this container (hpctrain/job/containers.py); the batch shell stays
    on the host. In image, mounts and workdir, $NAME / ${NAME} expand on the node ($$: a '$')."""
    runtime: Annotated[Runtime, Meta(description=(
            "the container runtime; on a cluster one the site declares "
            "(containers.runtimes), on local one installed here"))]
    image: Annotated[str, Meta(description=(
            "a .sif/.sqsh file, docker://..., nvcr.io#..., or an image name the "
            "runtime knows; $VAR expands on the node"))]
    mounts: Annotated[list[str], Meta(description=(
            "more binds, HOST[:CONTAINER[:ro|rw]]; the run and working "
            "directories are always bound at the same paths"))] = []
    workdir: Annotated[str | None, Meta(description=(
            "the ranks' directory in the container; null: the job's working "
            "directory (bound)"))] = None
    env: Annotated[dict[EnvName, EnvValue], Meta(description=(
            "more environment for the ranks inside, e.g. ACCEPT_EULA: Y"))] = {}
    options: Annotated[list[str], Meta(description=(
            "extra options for the runtime's exec/run (apptainer exec, podman "
            "run, ...; pyxis: the srun step)"))] = []
    isaac_sim_caches: Annotated[bool | None, Meta(description=(
            "bind Isaac Sim's caches from the site's containers.cache_dir; null: "
            "on when the job runs Isaac Lab's train.py"))] = None


class SiteContainers(_Strict):
    """What the site's nodes offer for containers (a job's `container:` is checked against it)."""
    runtimes: Annotated[list[Runtime] | None, Meta(description=(
            "the container runtimes installed on the nodes; a job asking for "
            "another is refused; null: not declared"))] = None
    commands: Annotated[dict[Runtime, str], Meta(description=(
            "how to call a runtime here, e.g. podman: podman --runtime runc"))] = {}
    options: Annotated[dict[Runtime, list[str]], Meta(description=(
            "options this site adds to every container of a runtime"))] = {}
    host_python: Annotated[str, Meta(description=(
            "interpreter on the nodes' host for hpctrain's stdlib-only helpers "
            "when the job's interpreter is in the image"))] = "python3"
    cache_dir: Annotated[str, Meta(description=(
            "where Isaac Sim's caches persist between jobs ($VAR expands on the "
            "node)"))] = "$HOME/.cache/hpctrain/isaac-sim"
    stage_dir: Annotated[str | None, Meta(description=(
            "node-local directory to copy an image file to before the launch, "
            "e.g. $TMPDIR/images"))] = None


class Sweep(_Strict):
    grid: Annotated[dict[str, list[Any]], Meta(description=(
            "key.path -> list of values; every combination is one array task"))] = {}
    variants: Annotated[list[dict[str, Any]], Meta(description=(
            "explicit variants, each a {key.path: value} mapping"))] = []
    seeds: Annotated[list[int], Meta(description="every variant once per seed")] = []
    parallel: Annotated[Count | None, Meta(description=(
            "array tasks running at once (%K); null: the site's array_parallelism"))] = None
    direction: Annotated[Literal["maximize", "minimize"] | None, Meta(description=(
            "which end of the tasks' reported metric `report` ranks best; null: the lowest "
            "of a loss, error, regret or cost, the highest of anything else (a reward)"))] = None


class SearchParam(_Strict):
    """One parameter of a study's space (hpctrain/search/spaces.py)."""
    type: Annotated[Literal["float", "int", "categorical"] | None, Meta(description=(
            "float, int or categorical; null: categorical with choices, int when both "
            "bounds are whole numbers, float otherwise"))] = None
    # A string too: YAML 1.1 reads 1e-5 (no dot) as one; __post_init__ makes it a number.
    low: Annotated[Union[int, float, str] | None, Meta(description="the lowest value")] = None
    high: Annotated[Union[int, float, str] | None, Meta(description="the highest value")] = None
    log: Annotated[bool, Meta(description=(
            "sample on a log scale (both bounds > 0)"))] = False
    choices: Annotated[list[Union[str, int, float, bool]], Meta(description=(
            "a categorical parameter's values"))] = []

    def __post_init__(self):
        for name in ("low", "high"):
            value = getattr(self, name)
            if isinstance(value, str):
                try:
                    setattr(self, name, float(value))
                except ValueError:
                    raise ValueError(f"{name} {value!r} is not a number") from None

    @property
    def kind(self) -> str:
        if self.type is not None:
            return self.type
        if self.choices:
            return "categorical"
        whole = all(isinstance(v, int) and not isinstance(v, bool) for v in (self.low, self.high))
        return "int" if whole else "float"


class Pbt(_Strict):
    """Population-based training (search.method pbt; hpctrain/search/pbt/): `parallel` members
    train at once, and every `interval` steps the bottom `fraction` copies a top member's newest
    checkpoint and explores from its values."""
    interval: Annotated[Count, Meta(description=(
            "training steps (the step the ranks report) between two decisions of a member"))]
    steps: Annotated[Count, Meta(description=(
            "the total training length in steps: a member that reaches it has ended"))]
    fraction: Annotated[float, Meta(gt=0, le=0.5, description=(
            "the bottom fraction that copies a member of the top fraction"))] = 0.25
    explore: Annotated[dict[str, Literal["perturb", "resample"]], Meta(description=(
            "key -> perturb (multiply by one of `factors`, kept in the space; with "
            "`resample_probability` a new value instead) or resample (a new value from the "
            "space); null: perturb numbers, resample choices"))] = {}
    factors: Annotated[list[Annotated[float, Meta(gt=0, le=100)]], Meta(
            min_length=1, max_length=8, description=(
            "the factors a perturbed value is multiplied by, one chosen at random"))] = field(
                default_factory=lambda: [0.8, 1.2])
    resample_probability: Annotated[float, Meta(ge=0, le=1, description=(
            "the chance that a value to perturb is drawn afresh from the space instead, each "
            "key on its own (as Ray Tune's PBT): a best value that moves by decades is reached; "
            "0: always perturb"))] = 0.25
    keep: Annotated[Annotated[int, Meta(ge=1, le=1000)], Meta(description=(
            "checkpoints each member keeps in the workspace (the newest)"))] = 2


class Search(_Strict):
    """A study: trials sampled by Optuna, run by `parallel` workers (hpctrain/search/)."""
    params: Annotated[dict[str, SearchParam], Meta(description=(
            "key.path (as a sweep's grid: env.LR, args.1, seed, or a Hydra override in "
            "args such as agent.params.config.learning_rate) -> its space"))]
    method: Annotated[Literal["optuna", "pbt"], Meta(description=(
            "optuna: trials sampled one after another (n_trials, sampler, pruner); pbt: "
            "population-based training, `parallel` members at once (pbt:)"))] = "optuna"
    pbt: Annotated[Pbt | None, Meta(description=(
            "population-based training's interval, length, exploit and explore rules "
            "(method pbt)"))] = None
    metric: Annotated[str, Meta(max_length=200, description=(
            "the progress metric the ranks report (hpctrain_progress.report) that the "
            "study optimizes"))] = "reward"
    direction: Annotated[Literal["maximize", "minimize"], Meta(description=(
            "maximize or minimize the metric"))] = "maximize"
    n_trials: Annotated[Count, Meta(description="trials in all")] = 20
    parallel: Annotated[Count, Meta(description=(
            "workers, each a whole allocation of the job's shape running one trial after "
            "another"))] = 1
    sampler: Annotated[Literal["tpe", "random"], Meta(description=(
            "Optuna's TPE, or random; grids stay `sweep:`"))] = "tpe"
    pruner: Annotated[Literal["none", "median", "hyperband", "successive_halving"], Meta(
            description="stop unpromising trials early; none: never")] = "median"
    warmup_steps: Annotated[NonNeg, Meta(description=(
            "training steps a trial runs before the pruner may stop it"))] = 0
    seed: Annotated[Annotated[int, Meta(ge=0, le=2 ** 32 - 1)] | None, Meta(description=(
            "the sampler's seed, 0 to 2**32-1 (numpy's range); worker i seeds with seed + "
            "1000 x i + the trials it ran"))] = None
    max_failures: Annotated[Count | None, Meta(description=(
            "failed trials in a row that stop the study; null: 3, or 2 x parallel "
            "when larger"))] = None


NotifyEvent = Literal["start", "preempted", "requeued", "hang", "node_excluded",
                      "node_replaced", "completed", "failed", "stopped"]


class Notify(_Strict):
    """Where a run's events are sent (hpctrain/rank/end/notify.py; `submit --wait --notify`)."""
    url_from: Annotated[EnvName, Meta(description=(
            "name of the environment variable holding the webhook URL; its value is "
            "never written"))]
    format: Annotated[Literal["json", "ntfy", "slack", "discord"], Meta(description=(
            "the webhook's body: a plain JSON object, or ntfy's, Slack's or "
            "Discord's"))] = "json"
    events: Annotated[list[NotifyEvent], Meta(description=(
            "the events sent: start, preempted, requeued, hang, node_excluded, "
            "node_replaced, completed, failed, stopped"))] = field(default_factory=lambda: list(
                NotifyEvent.__args__))


class IdleGpus(_Strict):
    """Stop a run whose GPUs all idle (rank/during/sampler.py): it saves and ends, not requeued."""
    below: Annotated[Annotated[float, Meta(ge=0, le=100)], Meta(description=(
            "the utilization, in percent, that every GPU of the run stays below"))] = 5
    for_: Annotated[Union[Seconds, Duration], Meta(description=(
            "for this long (seconds, or 90s, 20m, 1h): then the run saves and ends"))] = field(
                default="20m", name="for")

    def __post_init__(self):
        if self.seconds > MAX_SECONDS:  # "9999999h" fits the pattern
            raise ValueError(f"'for' is {self.for_}, longer than {MAX_SECONDS} s (23 days)")

    @property
    def seconds(self) -> int:
        if isinstance(self.for_, int):
            return self.for_
        return int(self.for_[:-1]) * {"s": 1, "m": 60, "h": 3600}[self.for_[-1]]


class Video(_Strict):
    """Rendered clips of the task (Isaac Lab's --video), bounded: each clip's frames are held in
    host memory until it is written (IsaacLab #5288, #1996), so its length and the number of clips
    have ceilings. A job with video: runs only where its GPUs can render (job/video.py)."""
    length: Annotated[Annotated[int, Meta(ge=1, le=MAX_VIDEO_LENGTH)], Meta(description=(
            f"environment steps per clip (at most {MAX_VIDEO_LENGTH}: its frames are held in "
            "memory until it is written)"))] = 200
    count: Annotated[Annotated[int, Meta(ge=1, le=MAX_VIDEO_COUNT)], Meta(description=(
            f"clips in all, at most {MAX_VIDEO_COUNT}; the first starts at step 0"))] = 1
    interval: Annotated[Annotated[int, Meta(ge=1, le=MAX_COUNT)], Meta(description=(
            "environment steps from one clip's start to the next's (with count > 1)"))] = 2000

    def __post_init__(self):
        if self.count > 1 and self.interval < self.length:
            raise ValueError(f"'interval' ({self.interval}) is shorter than 'length' "
                             f"({self.length}): clips would overlap")


class Health(_Strict):
    """Each node's health gate before training (rank/before/health.py), read from nvidia-smi in the
    node check of the launch (or, without one, in each node's launch process before torchrun's
    agent); a node that fails it is named and left out at the requeue. Slow ranks, judged
    from their progress rates (rank/during/slow.py). And the network floor (rank/before/netfloor.py)."""
    enabled: Annotated[bool | None, Meta(description=(
            "check each node's GPUs before the ranks start; null: on for jobs that ask "
            "for GPUs"))] = None
    gpus: Annotated[bool, Meta(description=(
            "the GPUs the job asks for (resources.gpus_per_node) are visible and "
            "nvidia-smi answers"))] = True
    ecc: Annotated[bool, Meta(description=(
            "no uncorrected volatile ECC error on any of them"))] = True
    row_remap: Annotated[bool, Meta(description=(
            "no row remap pending or failed (Ampere and later)"))] = True
    retired_pages: Annotated[bool, Meta(description=(
            "no page retirement pending (GPUs before Ampere)"))] = True
    foreign_memory_mib: Annotated[NonNeg | None, Meta(description=(
            "a GPU holding more MiB than this before the ranks start is taken by "
            "another process; null: not checked"))] = 1024
    same_driver: Annotated[bool, Meta(description=(
            "every node runs the same NVIDIA driver version; the odd node is "
            "named"))] = True
    timeout: Annotated[Seconds, Meta(description=(
            "seconds one nvidia-smi query may take before the node counts as "
            "unhealthy"))] = 30
    require_nvidia_smi: Annotated[bool, Meta(description=(
            "a job that asks for GPUs fails a node whose nvidia-smi is missing or answers "
            "without a field the gate reads; false: such a node passes unchecked, with a "
            "note (a site without NVIDIA's tools)"))] = True
    cuda: Annotated[bool, Meta(description=(
            "each of the job's GPUs takes a tiny CUDA allocation (torch, in the job's "
            "interpreter) before training; skipped with a note where torch is not "
            "importable, and where the ranks run on CPU (cpu_mode: on)"))] = True
    dcgm_diag: Annotated[bool, Meta(description=(
            "also run DCGM's quick diagnostic (dcgmi diag -r 1) on each node where dcgmi "
            "is installed; a test it fails fails the node"))] = False
    slow_rank_factor: Annotated[Annotated[float, Meta(gt=0, lt=1)] | None, Meta(description=(
            "a rank whose rate stays below this times the ranks' median is named "
            "slow; null: not judged"))] = 0.8
    slow_rank_window: Annotated[Seconds, Meta(description=(
            "seconds of its own reports a rank's rate must cover before it is "
            "judged"))] = 300
    exclude_slow_nodes: Annotated[bool, Meta(description=(
            "leave a slow rank's node out at the next requeue (within "
            "preemption.max_excluded_nodes)"))] = False
    allreduce_min_gbps: Annotated[Annotated[float, Meta(ge=0, le=100_000)] | None, Meta(description=(
            "multi-node jobs: the nodes time an all-reduce (NCCL's ring on GPUs) before "
            "training; bus bandwidth below this many Gbit/s stops the attempt and leaves out "
            "the slowest pair's node at the requeue; 0: measured and shown, never failing; "
            "null: not measured"))] = None


class JobSpec(_Strict):
    name: Annotated[Name, Meta(description=(
            "the run's name, [A-Za-z0-9_.-]+; runs go to runs/<name>/<run id>/"))]
    site: Annotated[str | None, Meta(description=(
            "site profile name or file; --site wins, then this, then "
            "$HPCTRAIN_SITE; null: local"))] = None
    library: Annotated[str, Meta(description=(
            "which adapter launches the job: an RL library, or command for any "
            "program"))] = "command"
    script: Annotated[str | None, Meta(description=(
            "the program every rank runs: a path, or -m module; null: the "
            "library's Isaac Lab train.py under isaaclab"))] = None
    args: Annotated[list[Union[str, int, float]], Meta(description=(
            "the program's arguments, passed byte-exact"))] = []
    python: Annotated[str | None, Meta(description=(
            "the interpreter on the nodes, as a command, e.g. isaaclab.sh -p; "
            "null: the interpreter running hpctrain"))] = None
    task: Annotated[str | None, Meta(description="Isaac Lab task, e.g. Isaac-Cartpole-v0")] = None
    isaaclab: Annotated[str | None, Meta(description=(
            "where Isaac Lab is on the nodes (in the image with a container): a "
            "checkout, a pip/uv environment, or a Python interpreter with isaaclab "
            "installed; its release is read from it at validate"))] = None
    isaaclab_version: Annotated[Release | None, Meta(description=(
            "the Isaac Lab release on the nodes, e.g. 3.0.0 or 2.3.2; null: read from "
            "the install (a container's image tag), else 2.x"))] = None
    isaaclab_assets: Annotated[str | None, Meta(description=(
            "Isaac asset root on the nodes (ISAACSIM_ASSET_ROOT on every rank): a "
            "mirror on shared storage for nodes without internet; null: Isaac Lab's "
            "own (a public URL)"))] = None
    config: Annotated[str | None, Meta(description="DI-engine config file")] = None
    resources: Annotated[Resources, Meta(description=(
            "nodes, GPUs, ranks, CPUs, memory, time and Slurm's accounting keys"))] = field(default_factory=Resources)
    env: Annotated[dict[EnvName, EnvValue], Meta(description=(
            "environment variables for every rank"))] = {}
    secrets: Annotated[list[EnvName], Meta(description=(
            "names of variables passed from the submitting environment to the "
            "ranks; their values are never written"))] = []
    seed: Annotated[int | None, Meta(description=(
            "base seed; each rank gets HPCTRAIN_SEED = seed + global rank"))] = None
    cpu_mode: Annotated[Literal["auto", "on", "off"] | None, Meta(description=(
            "auto: CPU shims (gloo) on nodes without a GPU; on / off to force; "
            "null: the site's"))] = None
    launcher: Annotated[Launcher, Meta(description=(
            "how torchrun starts the ranks: restarts, rendezvous timeouts, "
            "preflight, hang detection"))] = field(default_factory=Launcher)
    preemption: Annotated[Preemption, Meta(description=(
            "the signal ahead of the time limit or on preemption, the save, the "
            "requeue"))] = field(default_factory=Preemption)
    sweep: Annotated[Sweep | None, Meta(description=(
            "one job array over a grid, variants and seeds"))] = None
    search: Annotated[Search | None, Meta(description=(
            "a study: Optuna samples the parameters of each trial, pruned early when "
            "unpromising"))] = None
    setup: Annotated[list[str], Meta(description=(
            "shell lines run on the batch host before the launch"))] = []
    container: Annotated[Container | None, Meta(description=(
            "run each node's launch in a container; the batch shell stays on the "
            "host"))] = None
    runs_dir: Annotated[str | None, Meta(description=(
            "where run directories go; null: $HPCTRAIN_RUNS_DIR, else ./runs"))] = None
    # Scheduler options of this job that hpctrain does not own (job/sbatch_options.py): reservation,
    # mail-type, exclude, nodelist, begin, ... -> the directive table, after the site's extras.
    sbatch: Annotated[dict[str, OptionValue], Meta(description=(
            "scheduler options hpctrain does not own: reservation, mail-type, "
            "exclude, nodelist, begin, ...; true for a flag, a list joined with "
            "commas"))] = {}
    after: Annotated[Union[str, list[str]], Meta(description=(
            "runs (or job ids) this job waits for: RUN (afterok), afterany:RUN, "
            "afternotok:RUN; one or a list; --after replaces it"))] = []
    snapshot: Annotated[Union[bool, Snapshot], Meta(description=(
            "true: the job runs a copy of the code taken at submit; false: the "
            "live tree; or a section"))] = True
    notify: Annotated[Notify | None, Meta(description=(
            "send the run's events to a webhook (`submit --wait --notify`); a "
            "site sets one in its defaults"))] = None
    sample_every: Annotated[Annotated[float, Meta(ge=0, le=3600)], Meta(description=(
            "seconds between two samples of each node's GPUs (or CPU ranks) for "
            "`hpctrain report`; 0: no sampling"))] = 5
    idle_gpus: Annotated[IdleGpus | None, Meta(description=(
            "stop the run (save, end, no requeue) when all its GPUs stay below a "
            "utilization for a window; null: never"))] = None
    health: Annotated[Health, Meta(description=(
            "each node's GPU health gate before training; the site's health: "
            "section first"))] = field(default_factory=Health)
    video: Annotated[Video | None, Meta(description=(
            "record clips of the task (Isaac Lab --video), bounded; the job then runs only "
            "on GPUs that can render (RT cores)"))] = None


class HeadAddress(_Strict):
    """How nodes reach the rendezvous host: its Slurm name, its IP on an interface, name+suffix."""
    mode: Annotated[Literal["nodename", "interface", "suffix"], Meta(description=(
            "how other nodes reach the rendezvous host: its node name, its IPv4 "
            "on an interface, or its name + a suffix"))] = "nodename"
    interface: Annotated[str | None, Meta(description=(
            "mode interface: the interface whose IPv4 address is used, e.g. ib0"))] = None
    suffix: Annotated[str | None, Meta(description=(
            "mode suffix: added to the node name, e.g. -ib (node12 -> node12-ib)"))] = None


class PortRule(_Strict):
    """Rendezvous port: fixed, or base + 2*(job id mod span/2) — the same on every node."""
    base: Annotated[Annotated[int, Meta(ge=1024, le=65534)], Meta(description=(
            "lowest rendezvous port; above Linux's ephemeral range (32768-60999)"))] = 61000
    span: Annotated[Annotated[int, Meta(ge=2)], Meta(description=(
            "ports used: base + 2*(job id mod span/2), the same on every node"))] = 4536
    fixed: Annotated[Annotated[int, Meta(ge=1024, le=65534)] | None, Meta(description=(
            "one fixed rendezvous port instead of the rule"))] = None


class Limits(_Strict):
    max_nodes: Annotated[Count | None, Meta(description="most nodes a job may ask for")] = None
    max_gpus_per_node: Annotated[NonNeg | None, Meta(description="GPUs a node has")] = None
    max_procs_per_node: Annotated[Count | None, Meta(description="most ranks per node")] = None
    cpus_per_node: Annotated[Count | None, Meta(description=(
            "CPUs a node can give one job; library needs stay within it"))] = None
    max_time: Annotated[SlurmTime | None, Meta(description=(
            "the longest time limit a job may ask for"))] = None
    max_array_size: Annotated[Count | None, Meta(description=(
            "Slurm's MaxArraySize: a bigger sweep is refused before it is "
            "expanded; null: 1001"))] = None
    mem_per_node: Annotated[Memory | None, Meta(description=(
            "memory a node can give a job (Slurm's RealMemory)"))] = None


class SshOptions(_Strict):
    """How hpctrain reaches the hosts of a `scheduler: ssh` site (OpenSSH, always in batch mode:
    never a password prompt). Everything else comes from the user's own ~/.ssh/config."""
    user: Annotated[str | None, Meta(description=(
            "ssh -l; null: ssh's own choice (~/.ssh/config, then the local user)"))] = None
    port: Annotated[Annotated[int, Meta(ge=1, le=65535)] | None, Meta(description="ssh -p")] = None
    identity: Annotated[str | None, Meta(description="IdentityFile, with IdentitiesOnly")] = None
    known_hosts: Annotated[str | None, Meta(description=(
            "UserKnownHostsFile; its name holds known_hosts (ssh adds the keys it accepts to "
            "it)"))] = None
    host_key: Annotated[Literal["strict", "accept-new", "ignore"], Meta(description=(
            "StrictHostKeyChecking: strict (only known keys), accept-new "
            "(remember a first key, refuse a changed one), ignore"))] = "strict"
    connect_timeout: Annotated[Seconds, Meta(description=(
            "seconds before a host that does not answer is named"))] = 10
    options: Annotated[list[str], Meta(description=(
            "more ssh options, Key=value each (as after ssh -o), only these: "
            "ServerAliveInterval, ServerAliveCountMax, ConnectionAttempts, TCPKeepAlive, "
            "Compression, AddressFamily, IPQoS, Ciphers, PreferredAuthentications, "
            "PubkeyAuthentication, PasswordAuthentication, KbdInteractiveAuthentication, "
            "GSSAPIAuthentication, IdentitiesOnly=yes (none runs a program, forwards, redirects "
            "the connection or changes host-key trust); one hpctrain gives every ssh itself "
            "with the same value (BatchMode=yes, LogLevel=ERROR, ForwardAgent=no, ForwardX11=no, "
            "ClearAllForwardings=yes, PermitLocalCommand=no, Tunnel=no) is left out with a "
            "note; anything else belongs in your own ~/.ssh/config"))] = []


class SyncRule(_Strict):
    """Where the hosts find the run directory: on a filesystem they all share (NFS home), or
    copied to each of them (rsync) before the launch and brought back."""
    mode: Annotated[Literal["shared", "rsync"], Meta(description=(
            "shared: the hosts see the run directory on a shared file system; "
            "rsync: it is copied to each host and back"))] = "shared"
    code: Annotated[bool, Meta(description=(
            "rsync: copy the job's working directory (the code) to each host too"))] = False
    exclude: Annotated[list[str], Meta(description=(
            "rsync patterns left out of that copy, e.g. [.git, data/]"))] = []


class RemoteRule(_Strict):
    """Where a site reached through `login:` keeps runs, and how much code a submit may copy."""
    runs_dir: Annotated[str | None, Meta(description=(
            "an absolute path on the cluster; runs/<name>/<run id>/ go below it"))] = None
    code_max_mb: Annotated[Count, Meta(description=(
            "a submit that would copy more of the working directory stops"))] = 200
    exclude: Annotated[list[str], Meta(description=(
            "rsync patterns left out of the code copy, beside .gitignore's"))] = []


class RestRule(_Strict):
    """Submitting through the cluster's REST API (slurmrestd, JWT) instead of Slurm's tools
    (backends/slurm/rest.py). The token is passed by name, like a secret: never written."""
    url: Annotated[str, Meta(max_length=2048, description=(
            "slurmrestd's address, https://host:port (e.g. https://slurm.example.org:6820); "
            "plain http:// sends the token readable, fit for 127.0.0.1 (an ssh tunnel) or a "
            "network you trust; no user name or password in it"))]
    token_from: Annotated[str, Meta(max_length=4096, description=(
            "where your JWT (scontrol token) is: SLURM_JWT or SLURM_JWT_<name>, the variable "
            "holding it, or the absolute path (/... or ~/...) of a file of yours only you can "
            "write; no other variable is read; the token is never written"))]
    user: Annotated[Union[Annotated[str, Meta(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")],
                          None], Meta(description=(
            "your user name on the cluster (X-SLURM-USER-NAME); null: the name the token "
            "carries"))] = None
    version: Annotated[Literal["auto", "v0.0.38", "v0.0.39", "v0.0.40", "v0.0.41", "v0.0.42"],
                       Meta(description=(
            "the OpenAPI plugin version to speak (slurmrestd -s openapi/...); auto: the newest "
            "the server answers"))] = "auto"
    timeout: Annotated[Annotated[float, Meta(gt=0, le=3600)], Meta(description=(
            "seconds one request to slurmrestd may take in all (connecting, sending, reading "
            "the whole answer); a server slower than that is named"))] = 30


class SiteProfile(_Strict):
    name: Annotated[Name, Meta(description="the site's name, as jobs and --site give it")]
    description: Annotated[str, Meta(description="one line about the site")] = ""
    scheduler: Annotated[str, Meta(description=(
            "what runs the jobs: Slurm, this machine, or hosts over ssh"))] = "slurm"
    slurm_version: Annotated[str | None, Meta(description=(
            "the Slurm release `site detect` found, e.g. 24.11.5 (doctor says when the "
            "cluster runs another one now); informational"))] = None
    gpu_request: Annotated[Literal["gpus-per-node", "gres"], Meta(description=(
            "how GPUs are asked for: --gpus-per-node=[type:]N or "
            "--gres=gpu[:type]:N"))] = "gpus-per-node"
    gpu_type: Annotated[str | None, Meta(description="GPU type in the request, e.g. a100")] = None
    gpu_models: Annotated[dict[Partition, Annotated[list[GpuModel], Meta(min_length=1, max_length=16)]],
                          Meta(max_length=256, description=(
            "the GPU models of each partition's nodes (GRES types or nvidia-smi names), e.g. "
            "{gpu: [h100], viz: [l40s]}: video jobs go to one whose GPUs can render; "
            "site detect writes it"))] = {}
    limits: Annotated[Limits, Meta(description=(
            "what the nodes can hold; jobs asking for more are refused before "
            "they are submitted"))] = field(default_factory=Limits)
    modules: Annotated[list[str], Meta(description=(
            "module load arguments before the launch (run with set +u, strict "
            "mode restored)"))] = []
    module_init: Annotated[str | None, Meta(description=(
            "a file to source before module is used, where the batch shell lacks "
            "it, e.g. /usr/share/lmod/lmod/init/bash"))] = None
    setup: Annotated[list[str], Meta(description=(
            "shell lines (the site's own, trusted) before the launch"))] = []
    sbatch_extra: Annotated[list[str], Meta(description=(
            "extra directives, e.g. --reservation=rl"))] = []
    sbatch_skip: Annotated[list[str], Meta(description=(
            "directives this site rejects, e.g. mem"))] = []
    sbatch_forbid: Annotated[list[str], Meta(description=(
            "scheduler options jobs may not set in their sbatch: here"))] = []
    env: Annotated[dict[EnvName, EnvValue], Meta(description=(
            "environment for every rank: NCCL tuning and the like "
            "(NCCL_SOCKET_IFNAME is a prefix match; =ib0 exact, ^lo excludes)"))] = {}
    head: Annotated[HeadAddress, Meta(description=(
            "how other nodes reach the rendezvous host"))] = field(default_factory=HeadAddress)
    port: Annotated[PortRule, Meta(description=(
            "the rendezvous port rule"))] = field(default_factory=PortRule)
    cpu_mode: Annotated[Literal["auto", "on", "off"], Meta(description=(
            "auto: CPU shims (gloo) on nodes without a GPU; on / off to force"))] = "auto"
    array_parallelism: Annotated[Count | None, Meta(description=(
            "sweep tasks running at once unless the job says otherwise"))] = None
    containers: Annotated[SiteContainers, Meta(description=(
            "the container runtimes the nodes have, and how to run them"))] = field(default_factory=SiteContainers)
    defaults: Annotated[dict[str, Any], Meta(description=(
            "any job-file keys every job on this site starts from (site < job < "
            "--set)"))] = {}
    health: Annotated[Health, Meta(description=(
            "the nodes' health gate for every job here; a job's health: keys "
            "override these"))] = field(default_factory=Health)
    # scheduler ssh (backends/ssh/backend.py): the hosts, how to reach them, how they see the run.
    # hosts: a Slurm-style list ("ws[1-4]"), a YAML list, or a hostfile (a path: it holds a "/").
    hosts: Annotated[Union[str, list[str], None], Meta(description=(
            "scheduler ssh: the hosts, a Slurm-style list (ws[1-4]), a YAML list,"
            " or a hostfile path (it holds a /)"))] = None
    ssh: Annotated[SshOptions, Meta(description=(
            "how hosts (scheduler ssh) or the login node (login:) are reached; "
            "OpenSSH, always in batch mode"))] = field(default_factory=SshOptions)
    sync: Annotated[Union[Literal["shared", "rsync"], SyncRule], Meta(description=(
            "scheduler ssh: where the hosts find the run directory: shared, "
            "rsync, or a section"))] = "shared"
    # Submitting from another machine (a laptop, a notebook server): the scheduler's tools run
    # on this login node ("user@host" or "host") over ssh with the ssh: section's options, the
    # run lives under remote.runs_dir there (backends/slurm/login.py); here a mirror keeps run.json.
    login: Annotated[str | None, Meta(description=(
            "submit from another machine: the scheduler's tools run on this login"
            " node (user@host or host) over ssh"))] = None
    remote: Annotated[RemoteRule, Meta(description=(
            "with login: where runs live on the cluster and how much code a "
            "submit may copy"))] = field(default_factory=RemoteRule)
    rest: Annotated[RestRule | None, Meta(description=(
            "submit and follow through slurmrestd instead of Slurm's tools: {url, "
            "token_from}; runs live on a file system both sides see"))] = None

    def gpu_type_on(self, partition: str | None) -> str | None:
        """The GPU type a job on `partition` asks for: gpu_type, unless gpu_models says that
        partition has other GPUs (site detect writes the type of the partition it describes,
        and gpu_models for every partition); then that partition's one GRES type, or none."""
        models = self.gpu_models.get(partition or "", [])
        if not models or self.gpu_type in models:
            return self.gpu_type
        return models[0] if len(models) == 1 and re.fullmatch(r"[A-Za-z0-9_.-]+", models[0]) else None

    def gpu_models_on(self, partition: str | None) -> list[str]:
        """The GPU models a job on `partition` gets, as far as the profile says: the type it asks
        for, else the partition's gpu_models ([]: the profile does not say)."""
        asked = self.gpu_type_on(partition)
        return [asked] if asked else list(self.gpu_models.get(partition or "", []))


# ---------------------------------------------------------------------------- merging

def deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """'resources.nodes=2' -> (('resources', 'nodes'), 2); values are YAML scalars/lists."""
    if "=" not in text:
        raise HpctrainError(f"--set needs key.path=value, got '{text}'",
                            fix="e.g. --set resources.nodes=2")
    key, _, raw = text.partition("=")
    path = tuple(p for p in key.strip().split(".") if p)
    if not path:
        raise HpctrainError(f"--set has an empty key in '{text}'", fix="e.g. --set resources.nodes=2")
    if _DECIMAL.fullmatch(raw):  # --set resources.nodes=4: YAML reads it as that int, always
        return path, int(raw)
    import yaml  # a tenth of render's time: only for values that need it
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return path, value


# A plain decimal without sign, leading zero or '_': one int in YAML 1.1 (PyYAML's int resolver),
# never a float, date, sexagesimal (1:30) or octal (017) or anything else.
_DECIMAL = re.compile(r"[1-9][0-9]{0,17}")


def set_path(data: dict, path: tuple, value) -> dict:
    """A copy of data with the value at path replaced. Through a list, a key must be an index
    of an existing element (args.0=x sets the first argument); ValueError otherwise."""
    def put(node, keys):
        key = keys[0]
        if isinstance(node, list):
            if not (isinstance(key, int) or str(key).isdigit()) or int(key) >= len(node):
                raise ValueError(f"'{key}' is not an index of this list of {len(node)} "
                                 f"(0..{len(node) - 1})")
            out = list(node)
            out[int(key)] = value if len(keys) == 1 else put(out[int(key)], keys[1:])
            return out
        out = dict(node) if isinstance(node, dict) else {}
        out[key] = value if len(keys) == 1 else put(out.get(key), keys[1:])
        return out
    return put(data, tuple(path))


# ---------------------------------------------------------------------------- errors

# Patterns used only to explain an error: compiled (and cached by re) when one happens.
_AT = r"(?s)^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$"
_SEG = r"\.([A-Za-z0-9_\-]+)|\[(\d+|\.\.\.)\]"


def _split_path(text: str) -> tuple:
    return tuple(m.group(1) if m.group(1) is not None else
                 (int(m.group(2)) if m.group(2).isdigit() else "...")
                 for m in re.finditer(_SEG, text or ""))


def _struct_in(tp):
    """The Struct member of a union such as `bool | Snapshot` (whose keys an error lists)."""
    import typing
    members = [a for a in typing.get_args(tp) if isinstance(a, type) and issubclass(a, Struct)]
    return members[0] if len(members) == 1 else tp


def _type_at(root: type, path: tuple):
    """The schema type at a key path (for listing valid keys), or None."""
    import typing
    tp = root
    for key in path:
        tp = _struct_in(_unwrap(tp))
        if isinstance(tp, type) and issubclass(tp, Struct):
            hints = typing.get_type_hints(tp, include_extras=True)
            if key not in hints:  # a key renamed in YAML (`for` is the field `for_`)
                key = {f.encode_name: f.name for f in msgspec.structs.fields(tp)}.get(key)
                if key not in hints:
                    return None
            tp = hints[key]
        else:
            args = typing.get_args(tp)
            tp = args[-1] if args else None
    return _struct_in(_unwrap(tp))


def _unwrap(tp):
    import typing
    while True:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            tp = typing.get_args(tp)[0]
        elif origin is Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            import types
            if isinstance(tp, types.UnionType):
                args = [a for a in tp.__args__ if a is not type(None)]
                if len(args) == 1:
                    tp = args[0]
                    continue
            return tp


def _literal_options(tp) -> list[str] | None:
    import typing
    tp = _unwrap(tp)
    if typing.get_origin(tp) is Literal:
        return [str(a) for a in typing.get_args(tp)]
    return None


_IN_KEY = r"(?s)^(?P<what>.*?) - at `key` in `\$(?P<path>[^`]*)`$"


def explain(exc: msgspec.ValidationError, root: type, where, data=None) -> HpctrainError:
    """Turn msgspec's message into what/where/fix. `where(path)` names the file:line; `data` is
    the document that failed, to name the value (and the key msgspec calls `...`)."""
    text = str(exc)
    in_key = re.match(_IN_KEY, text)
    m = in_key or re.match(_AT, text)
    what, path = m.group("what"), _split_path(m.group("path") or "")
    if in_key:  # a mapping's key failed (env: {A-B: 1}): find which
        bad = _bad_key(data, path)
        if bad is not None:
            path = path + (bad,)
        dotted = ".".join(str(p) for p in path[:-1])
        return HpctrainError(f"'{path[-1]}' is not a valid key in '{dotted}'", where(path),
                             _pattern_hint(path) or what)
    if "..." in path:
        path = _resolve_dots(data, path, root)
    dotted = ".".join(str(p) for p in path)
    fix = None
    unknown = re.match(r"Object contains unknown field `([^`]*)`", what)
    missing = re.match(r"Object missing required field `([^`]*)`", what)
    if unknown:
        key = unknown.group(1)
        tp = _type_at(root, path)
        fields = getattr(tp, "__struct_fields__", ())
        what = f"unknown key '{key}'" + (f" in '{dotted}'" if dotted else "")
        path = path + (key,)
        fix = did_you_mean(key, fields) if fields else None
    elif missing:
        key = missing.group(1)
        what = f"missing required key '{key}'" + (f" in '{dotted}'" if dotted else "")
        fix = f"add '{key}: …'" if (dotted, key) != ("notify", "url_from") else (
            "add url_from: NAME, the environment variable that holds the webhook URL")
    else:
        options = _literal_options(_type_at(root, path))
        if what.startswith("Invalid enum value") and options:
            fix = "valid: " + ", ".join(options)
            bad = re.search(r"'(.*)'", what)
            if bad:
                fix = did_you_mean(bad.group(1), options)
        value = _value_at(data, path)
        if path[-2:] == ("notify", "url_from"):
            what, fix = _url_from_error(value)
            return HpctrainError(what, where(path), fix)
        text_number = _exponent_as_text(root, path, value)
        if text_number:
            return HpctrainError(f"'{dotted}' is {value}, which YAML 1.1 reads as text, not a "
                                 "number (its exponent lacks a '.' or a sign)", where(path),
                                 text_number)
        if "regex" in what:
            what = f"'{dotted}' is {value!r}, which is not valid here" if value is not _MISSING \
                else f"'{dotted}' does not have the required form"
            fix = _pattern_hint(path)
        else:
            what = f"'{dotted}': {what[0].lower()}{what[1:]}" if dotted else what
            if path[-1:] in (("time",), ("max_time",)) and isinstance(value, int):
                # YAML 1.1 reads an unquoted 1:30:00 as the number 5400.
                fix = 'quote it: time: "1:30:00" (YAML reads an unquoted H:MM:SS as a number)'
            elif path[-1:] in (("mem",), ("mem_per_cpu",), ("mem_per_node",)) and \
                    isinstance(value, int) and not isinstance(value, bool):
                fix = (f"give a size with its unit: {path[-1]}: {value}G (or {value}M; a bare "
                       "number would be megabytes to Slurm)")
            else:
                fix = fix or _type_hint(what)
    return HpctrainError(what, where(path), fix)


def _url_from_error(value) -> tuple[str, str]:
    """(what, fix) for a notify.url_from that is not a variable's name. A pasted URL is a secret
    (it may carry a token): it is not repeated."""
    example = "e.g. export NTFY_URL='https://ntfy.sh/my-topic' and url_from: NTFY_URL"
    if isinstance(value, str) and ("://" in value or "/" in value):  # ntfy.sh/topic too
        return ("'notify.url_from' holds a URL, but it takes the name of the environment "
                "variable that holds the URL (the URL itself is never written into a job)",
                f"put the URL in a variable and give its name: {example}")
    if isinstance(value, str) and value.startswith("$"):
        name = value.strip("${}")
        return (f"'notify.url_from' is {value[:64]!r}: it takes the variable's name, not its "
                f"value", f"write the name without '$': url_from: {name or 'NTFY_URL'}")
    shown = repr(value[:64]) if isinstance(value, str) else repr(value)[:64]
    return (f"'notify.url_from' is {shown}, not the name of an environment variable",
            "give the name of the variable that holds the webhook URL (a letter or '_', then "
            f"letters, digits and '_'): {example}")


# A number with an exponent that YAML 1.1 (PyYAML) leaves as text: 1.5e1, 1e3, 2E-5. It takes
# an exponent only after a '.' in the number and with a sign: 1.5e+1, 1.0e+3.
_EXPONENT = re.compile(r"([-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))[eE]([-+]?)([0-9]{1,3})")


def _exponent_as_text(root: type, path: tuple, value) -> str | None:
    """The fix for a key that takes a number whose value YAML read as text only because of how
    its exponent is written; None for anything else."""
    match = _EXPONENT.fullmatch(value) if isinstance(value, str) else None
    kind = _number_kind(_type_at(root, path)) if match else None
    if kind is None:
        return None
    number = float(value)
    if kind is int:
        return (f"write it as {int(number)}" if number.is_integer()
                else f"give a whole number ({value} is {number!r})")
    mantissa, sign, exponent = match.groups()
    spelled = f"{mantissa if '.' in mantissa else mantissa + '.0'}e{sign or '+'}{exponent}"
    plain = repr(number)
    return f"write it as {spelled}" + (f" or {plain}" if plain[-1].isdigit() and "e" not in plain
                                       else "")


def _number_kind(tp):
    """float where a key takes any number, int where it takes whole numbers only, else None."""
    import types
    import typing
    kinds, stack = set(), [tp]
    while stack:
        t = stack.pop()
        if typing.get_origin(t) is Annotated:
            stack.append(typing.get_args(t)[0])
        elif typing.get_origin(t) is Union or isinstance(t, types.UnionType):
            stack.extend(typing.get_args(t))
        elif t in (int, float):
            kinds.add(t)
    return float if float in kinds else (int if kinds else None)


_EXPECTED = {"int": "a whole number", "str": "text (quote it if YAML reads it as something "
             "else)", "bool": "true or false", "array": "a list: [a, b]", "object":
             "a mapping: {key: value}", "float": "a number",
             "bool | int | float | str": "one value: text, a number or true/false",
             "bool | object": "true, false, or a mapping (e.g. {max_mb: 500})"}


def _type_hint(what: str) -> str | None:
    bound = re.search(r"`[^`]*` ([<>]=?) ([0-9.]+)", what)
    if bound:
        return f"give a value {bound.group(1)} {bound.group(2)}"
    m = re.search(r"[Ee]xpected `([^`]*)`", what)
    if m is None:
        return None
    expected = m.group(1)
    if expected in _EXPECTED:
        return f"give {_EXPECTED[expected]}"
    if expected.endswith(" | null") and expected[:-7] in _EXPECTED:
        return f"give {_EXPECTED[expected[:-7]]}, or null"
    return None


_MISSING = object()


def _value_at(data, path: tuple):
    node = data
    for key in path:
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
        else:
            return _MISSING
    return node


def _bad_key(data, path: tuple):
    mapping = _value_at(data, path)
    if not isinstance(mapping, dict):
        return None
    env_name = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
    return next((k for k in mapping if not (isinstance(k, str) and env_name.fullmatch(k))), None)


def _resolve_dots(data, path: tuple, root: type) -> tuple:
    """msgspec names a mapping's failing value `...`: find its key by converting each value
    to the mapping's value type."""
    i = path.index("...")
    mapping = _value_at(data, path[:i])
    value_type = _type_at(root, path[:i] + ("x",))
    if isinstance(mapping, dict) and value_type is not None:
        for key, value in mapping.items():
            try:
                msgspec.convert(value, value_type)
            except (msgspec.ValidationError, TypeError):
                return path[:i] + (key,) + path[i + 1:]
    return path[:i]


def _pattern_hint(path: tuple) -> str | None:
    last = path[-1] if path else ""
    return {
        "time": "use Slurm's format: MM, HH:MM:SS or D-HH:MM:SS, e.g. \"02:00:00\"",
        "max_time": "use Slurm's format: MM, HH:MM:SS or D-HH:MM:SS, e.g. \"2-00:00:00\"",
        "mem": "a number with an optional K/M/G/T suffix, e.g. 64G",
        "name": "use letters, digits, '_', '.' and '-' only (and not just '.' or '..')",
    }.get(last) or ("names of environment variables: a letter or '_', then letters, digits "
                    "and '_'" if path[:1] in (("env",), ("secrets",)) else None)


# ---------------------------------------------------------------------------- conversion

def convert_site(doc: Located) -> SiteProfile:
    try:
        site = msgspec.convert(dict(doc), SiteProfile)
    except msgspec.ValidationError as exc:
        raise explain(exc, SiteProfile, doc.where, dict(doc)) from None
    return site


def slurm_seconds(text: str) -> int:
    """Slurm time string -> seconds (formats as in `sbatch --time`)."""
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
        parts = [int(p) for p in text.split(":")]
        h, m, s = (parts + [0, 0])[:3]
    else:
        parts = [int(p) for p in text.split(":")]
        if len(parts) == 1:
            h, m, s = 0, parts[0], 0
        elif len(parts) == 2:
            h, m, s = 0, parts[0], parts[1]
        else:
            h, m, s = parts
    return ((days * 24 + h) * 60 + m) * 60 + s


def env_text(value: EnvValue) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def default_runs_dir(spec: JobSpec) -> str:
    return spec.runs_dir or os.environ.get("HPCTRAIN_RUNS_DIR") or "runs"


def snapshot_settings(spec: JobSpec) -> Snapshot:
    """`snapshot: true|false` or the full mapping, as one value."""
    if isinstance(spec.snapshot, Snapshot):
        return spec.snapshot
    return Snapshot(enabled=bool(spec.snapshot))

"""The job model: what a job file and a site profile may say, merged and validated.

One schema (msgspec Structs) checks job files and site profiles. msgspec rather than pydantic
because `hpctrain render` must start in well under 0.2 s: pydantic's import plus model build
costs ~0.1 s, msgspec's ~0.015 s, with the same strictness (unknown keys, types, bounds).
Merging order: site defaults < job file < `--set key.path=value`.
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
Name = Annotated[str, Meta(pattern=r"^(?!\.\.?\Z)[A-Za-z0-9_.-]+\Z", max_length=100)]
EnvName = Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*\Z")]
EnvValue = Union[str, int, float, bool]
# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
SlurmTime = Annotated[str, Meta(pattern=r"^([0-9]+-[0-9]+(:[0-9]+){0,2}|[0-9]+(:[0-9]+){0,2})\Z")]
Memory = Annotated[str, Meta(pattern=r"^[0-9]+[KMGT]?\Z")]
Count = Annotated[int, Meta(ge=1)]
NonNeg = Annotated[int, Meta(ge=0)]
Seconds = Annotated[int, Meta(ge=1)]


class _Strict(Struct, forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
    pass


class Resources(_Strict):
    nodes: Count = 1
    gpus_per_node: NonNeg = 0
    procs_per_node: Count | None = None  # ranks per node; None: gpus_per_node, or 1 without GPUs
    # CPUs per rank; None: what the library says a rank needs (libraries/*: rank_needs), else 1.
    cpus_per_proc: Count | None = None
    mem: Memory | None = None  # per node, Slurm's --mem
    # Per CPU, Slurm's --mem-per-cpu (not with mem); None: the library's need, else the site's.
    mem_per_cpu: Memory | None = None
    time: SlurmTime = "01:00:00"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    exclusive: bool = False


class Launcher(_Strict):
    """How torchrun runs the ranks; timeouts in seconds, None = sized to the job."""
    max_restarts: NonNeg = 0  # torchrun restarts of the whole worker group inside one allocation
    join_timeout: Seconds | None = None  # all nodes must join the rendezvous within this
    last_call_timeout: Seconds | None = None  # grace for late nodes once the minimum joined
    close_timeout: Seconds | None = None
    collective_timeout: Seconds | None = None  # process-group (NCCL/gloo) collective timeout
    monitor_interval: Annotated[float, Meta(gt=0)] | None = None
    preflight: bool | None = None  # None: on for multi-node jobs
    preflight_timeout: Seconds | None = None  # every node must reach the head within this
    # No rank has progressed for this long: the ranks are ended (and restarted or requeued).
    hang_timeout: Seconds | None = None  # None: no hang detection


class Preemption(_Strict):
    """What happens ahead of the time limit or on preemption (see hpctrain/job/preemption.py); on
    schedulers without preemption (this machine) these settings do nothing."""
    enabled: bool = True  # False: no --signal/--requeue, the job simply ends at its limit
    signal: Literal["USR1", "USR2", "TERM", "INT", "HUP", "URG"] = "USR2"
    lead_time: Seconds = 120  # seconds before the time limit that Slurm sends the signal
    grace: Seconds = 90  # how long the ranks get to save after the signal
    requeue: bool = True
    max_requeues: NonNeg = 3  # compared with SLURM_RESTART_COUNT (requeues of any cause)
    # A requeue after a failure that names a node (preflight, hang, a node's hardware error)
    # leaves that node out; never more than this many in all (rank/recovery.py).
    max_excluded_nodes: NonNeg = 2


class Snapshot(_Strict):
    """The copy of the code the job runs, made at submit (hpctrain/runs/snapshot.py)."""
    enabled: bool = True
    max_mb: Annotated[int, Meta(ge=1, le=100_000)] = 200  # a bigger copy is refused at submit
    exclude: list[str] = []  # gitignore-style patterns left out (with .hpctrainignore's)


# A per-job scheduler option's value: text, a number, true for a flag (false/null: left out), or
# a list joined with commas (mail-type: [END, FAIL]). job/checks.py holds it to what a directive can carry.
OptionValue = Union[str, int, bool, list[Union[str, int]], None]
Runtime = Literal["apptainer", "singularity", "pyxis", "podman", "docker"]


class Container(_Strict):
    """Each node's launch runs in this container (hpctrain/job/containers.py); the batch shell stays
    on the host. In image, mounts and workdir, $NAME / ${NAME} expand on the node ($$: a '$')."""
    runtime: Runtime
    image: str  # a .sif/.sqsh file, docker://…, or an image name the runtime knows
    mounts: list[str] = []  # "HOST[:CONTAINER[:ro|rw]]"; the run and working directories always
    workdir: str | None = None  # in the container; None: the job's working directory (bound)
    env: dict[EnvName, EnvValue] = {}  # more environment for the ranks (e.g. ACCEPT_EULA: Y)
    options: list[str] = []  # extra options for the runtime's exec/run (or pyxis' srun step)
    isaac_sim_caches: bool | None = None  # None: on when the job runs Isaac Lab's train.py


class SiteContainers(_Strict):
    """What the site's nodes offer for containers (a job's `container:` is checked against it)."""
    runtimes: list[Runtime] | None = None  # installed on the nodes; None: not declared
    commands: dict[Runtime, str] = {}  # how to call a runtime, e.g. podman: "podman --runtime runc"
    options: dict[Runtime, list[str]] = {}  # options the site adds to every container
    host_python: str = "python3"  # runs hpctrain's stdlib-only helpers on the host (preflight…)
    cache_dir: str = "$HOME/.cache/hpctrain/isaac-sim"  # Isaac Sim's caches persist here
    stage_dir: str | None = None  # node-local directory to copy an image file to first


class Sweep(_Strict):
    grid: dict[str, list[Any]] = {}  # key.path -> values; the cartesian product
    variants: list[dict[str, Any]] = []  # explicit variants, each a {key.path: value} mapping
    seeds: list[int] = []  # every variant once per seed
    parallel: Count | None = None  # array tasks running at once (%K); None: site default


class JobSpec(_Strict):
    name: Name
    site: str | None = None
    library: str = "command"  # one of libraries.LIBRARIES (job/checks.py)
    script: str | None = None  # None: the library's Isaac Lab train.py
    args: list[Union[str, int, float]] = []
    # The interpreter on the nodes, as a command: "/opt/venv/bin/python", "isaaclab.sh -p".
    # None: the interpreter running hpctrain (like submitit), right when the venv is shared.
    python: str | None = None
    task: str | None = None  # Isaac Lab task, e.g. Isaac-Cartpole-v0
    isaaclab: str | None = None  # path of the Isaac Lab checkout on the cluster
    config: str | None = None  # DI-engine config file
    resources: Resources = field(default_factory=Resources)
    env: dict[EnvName, EnvValue] = {}
    secrets: list[EnvName] = []
    seed: int | None = None
    cpu_mode: Literal["auto", "on", "off"] | None = None  # None: the site's choice
    launcher: Launcher = field(default_factory=Launcher)
    preemption: Preemption = field(default_factory=Preemption)
    sweep: Sweep | None = None
    setup: list[str] = []  # shell lines run before the launch on the batch host
    container: Container | None = None  # run each node's launch in a container
    runs_dir: str | None = None  # None: $HPCTRAIN_RUNS_DIR, else ./runs
    # Scheduler options of this job that hpctrain does not own (job/sbatch_options.py): reservation,
    # mail-type, exclude, nodelist, begin, ... -> the directive table, after the site's extras.
    sbatch: dict[str, OptionValue] = {}
    # Runs (or scheduler job ids) this job waits for: "RUN" (afterok), "afterany:RUN",
    # "afternotok:RUN"; one or a list (job/chains.py). `--after` on the command line replaces it.
    after: Union[str, list[str]] = []
    # true (the default): the job runs a copy of the code taken at submit; false: the live tree.
    snapshot: Union[bool, Snapshot] = True


class HeadAddress(_Strict):
    """How nodes reach the rendezvous host: its Slurm name, its IP on an interface, name+suffix."""
    mode: Literal["nodename", "interface", "suffix"] = "nodename"
    interface: str | None = None  # mode interface: e.g. ib0 (the head's IPv4 on it)
    suffix: str | None = None  # mode suffix: e.g. -ib  (node12 -> node12-ib)


class PortRule(_Strict):
    """Rendezvous port: fixed, or base + 2*(job id mod span/2) — the same on every node."""
    base: Annotated[int, Meta(ge=1024, le=65534)] = 61000  # above Linux's ephemeral 32768-60999
    span: Annotated[int, Meta(ge=2)] = 4536
    fixed: Annotated[int, Meta(ge=1024, le=65534)] | None = None


class Limits(_Strict):
    max_nodes: Count | None = None
    max_gpus_per_node: NonNeg | None = None
    max_procs_per_node: Count | None = None
    cpus_per_node: Count | None = None
    max_time: SlurmTime | None = None
    max_array_size: Count | None = None
    mem_per_node: Memory | None = None  # what a node can give a job (Slurm's RealMemory)


class SshOptions(_Strict):
    """How hpctrain reaches the hosts of a `scheduler: ssh` site (OpenSSH, always in batch mode:
    never a password prompt). Everything else comes from the user's own ~/.ssh/config."""
    user: str | None = None  # -l; None: ssh's own choice (~/.ssh/config, then the local user)
    port: Annotated[int, Meta(ge=1, le=65535)] | None = None  # -p
    identity: str | None = None  # IdentityFile, with IdentitiesOnly
    known_hosts: str | None = None  # UserKnownHostsFile
    # StrictHostKeyChecking: strict = only known host keys (ssh's own rule in batch mode),
    # accept-new = remember a host's first key and refuse a changed one, ignore = no checking.
    host_key: Literal["strict", "accept-new", "ignore"] = "strict"
    connect_timeout: Seconds = 10  # ConnectTimeout: a host that does not answer is named after this
    options: list[str] = []  # more ssh options, "Key=value" each (as after ssh -o)


class SyncRule(_Strict):
    """Where the hosts find the run directory: on a filesystem they all share (NFS home), or
    copied to each of them (rsync) before the launch and brought back."""
    mode: Literal["shared", "rsync"] = "shared"
    code: bool = False  # rsync: copy the job's working directory (the code) to each host too
    exclude: list[str] = []  # rsync patterns left out of that copy, e.g. [.git, data/]


class RemoteRule(_Strict):
    """Where a site reached through `login:` keeps runs, and how much code a submit may copy."""
    runs_dir: str | None = None  # an absolute path on the cluster; runs/<name>/<run id>/ below it
    code_max_mb: Count = 200  # a submit that would copy more of the working directory stops
    exclude: list[str] = []  # rsync patterns left out of the code copy, beside .gitignore's


class SiteProfile(_Strict):
    name: Name
    description: str = ""
    scheduler: str = "slurm"  # one of backends.SCHEDULERS (checks.check_site)
    gpu_request: Literal["gpus-per-node", "gres"] = "gpus-per-node"
    gpu_type: str | None = None  # --gres=gpu:TYPE:N / --gpus-per-node=TYPE:N
    limits: Limits = field(default_factory=Limits)
    modules: list[str] = []  # `module load` arguments
    # A file to source before `module` is used, where the batch shell does not define it:
    # e.g. /usr/share/lmod/lmod/init/bash (Lmod), /usr/share/modules/init/bash (Environment Modules).
    module_init: str | None = None
    setup: list[str] = []  # shell lines (the site's own, trusted) before the launch
    sbatch_extra: list[str] = []  # extra directives, e.g. "--reservation=rl"
    sbatch_skip: list[str] = []  # directives this site rejects, e.g. "mem"
    sbatch_forbid: list[str] = []  # scheduler options jobs may not set here (job key `sbatch`)
    env: dict[EnvName, EnvValue] = {}  # NCCL tuning and the like, for every rank
    head: HeadAddress = field(default_factory=HeadAddress)
    port: PortRule = field(default_factory=PortRule)
    cpu_mode: Literal["auto", "on", "off"] = "auto"
    array_parallelism: Count | None = None
    containers: SiteContainers = field(default_factory=SiteContainers)
    defaults: dict[str, Any] = {}  # job-file keys that every job on this site starts from
    # scheduler ssh (backends/ssh/backend.py): the hosts, how to reach them, how they see the run.
    # hosts: a Slurm-style list ("ws[1-4]"), a YAML list, or a hostfile (a path: it holds a "/").
    hosts: Union[str, list[str], None] = None
    ssh: SshOptions = field(default_factory=SshOptions)
    sync: Union[Literal["shared", "rsync"], SyncRule] = "shared"
    # Submitting from another machine (a laptop, a notebook server): the scheduler's tools run
    # on this login node ("user@host" or "host") over ssh with the ssh: section's options, the
    # run lives under remote.runs_dir there (backends/slurm/login.py); here a mirror keeps run.json.
    login: str | None = None
    remote: RemoteRule = field(default_factory=RemoteRule)


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
        fix = f"add '{key}: …'"
    else:
        options = _literal_options(_type_at(root, path))
        if what.startswith("Invalid enum value") and options:
            fix = "valid: " + ", ".join(options)
            bad = re.search(r"'(.*)'", what)
            if bad:
                fix = did_you_mean(bad.group(1), options)
        value = _value_at(data, path)
        if "regex" in what:
            what = f"'{dotted}' is {value!r}, which is not valid here" if value is not _MISSING \
                else f"'{dotted}' does not have the required form"
            fix = _pattern_hint(path)
        else:
            what = f"'{dotted}': {what[0].lower()}{what[1:]}" if dotted else what
            if path[-1:] in (("time",), ("max_time",)) and isinstance(value, int):
                # YAML 1.1 reads an unquoted 1:30:00 as the number 5400.
                fix = 'quote it: time: "1:30:00" (YAML reads an unquoted H:MM:SS as a number)'
            else:
                fix = fix or _type_hint(what)
    return HpctrainError(what, where(path), fix)


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
    if m and m.group(1) in _EXPECTED:
        return f"give {_EXPECTED[m.group(1)]}"
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

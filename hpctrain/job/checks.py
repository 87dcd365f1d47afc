"""Every check a job or a site profile must pass beyond its types, made once, while loading.

Each error names the key, where its value came from (schema/origins.py: file:line, a --set argument,
an environment variable) and the fix; softer problems come back as warnings. After these pass,
any job can be planned and rendered: job/plan.py raises no user error.
"""
from __future__ import annotations

import itertools
import os
import re
import shlex

import msgspec

from ..errors import HpctrainError, did_you_mean
from ..rank.printable import clean
from ..schema.origins import Origins
from ..schema.spec import JobSpec, SiteProfile, slurm_seconds
from ..schema.yamlfile import Located


def procs_per_node(spec: JobSpec) -> int:
    r = spec.resources
    return r.procs_per_node or r.gpus_per_node or 1


# A directive value is read by the scheduler, not the shell, and split at whitespace.
_DIRECTIVE_VALUE = re.compile(r"[!-~]+")  # printable ASCII, no space
# A resource's name as sbatch reads it back byte-exact: printable ASCII without a space, `"` or
# `\` (measured on 22.05: `--account=a\b` and `--account="a\b"` both became "ab"; `"x"` is x).
_RESOURCE_VALUE = re.compile(r'[!#-\[\]-~]+')
_DIRECTIVE = re.compile(r"--[A-Za-z][A-Za-z0-9-]*(=[!-~]+)?")


# C0 and C1 control characters: a NUL is dropped by bash in silence, a newline or CR ends a line
# (a comment, a directive, a command). TAB is allowed in setup lines only (they are shell).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_IN_SHELL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def check_text(data, where, path: tuple = (), shell_lines: tuple = ("setup",)) -> None:
    """No control character in any key or string value of a job or site document."""
    stack = [(path, data)]
    while stack:
        at, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and _CONTROL.search(key):
                    _control(at + (key,), key, where)
                stack.append((at + (key,), item))
        elif isinstance(value, (list, tuple)):
            stack.extend((at + (i,), item) for i, item in enumerate(value))
        elif isinstance(value, str):
            pattern = _CONTROL_IN_SHELL if at[:1] in [(s,) for s in shell_lines] else _CONTROL
            if pattern.search(value):
                _control(at, value, where)


def _control(path: tuple, value: str, where) -> None:
    char = _CONTROL.search(value).group()
    shown = ".".join(map(str, path)) or "a key"
    fix = ("give each setup line as its own list entry" if path[:1] == ("setup",)
           else "remove it: control characters (NUL, newline, CR, escape, ...) have no place "
           "in a job; a newline would end a line of the job script")
    raise HpctrainError(f"'{shown}' holds the control character {char!r}", where(path), fix)


def check_site(site: SiteProfile, doc: Located) -> None:
    """A site profile on its own: names that must exist, settings that go together."""
    from ..backends import check_site as check_scheduler
    check_text(dict(doc), doc.where)
    check_scheduler(site, doc)
    head = site.head
    if head.mode == "interface" and not head.interface:
        raise HpctrainError("head.mode is 'interface' but head.interface is not set",
                            doc.where(("head", "mode")), "add e.g. interface: ib0 under head")
    if head.mode == "suffix" and not head.suffix:
        raise HpctrainError("head.mode is 'suffix' but head.suffix is not set",
                            doc.where(("head", "mode")), "add e.g. suffix: -ib under head")
    for i, extra in enumerate(site.sbatch_extra):
        if not _DIRECTIVE.fullmatch(extra):
            raise HpctrainError(f"sbatch_extra entry {extra!r} is not one scheduler option",
                                doc.where(("sbatch_extra", i)),
                                "write it as sbatch takes it, without spaces or quotes: "
                                "--reservation=rl, --exclusive")
    port = site.port
    top = port.fixed if port.fixed else port.base + 2 * (max(1, port.span // 2) - 1) + 1
    if top > 65535:
        raise HpctrainError(f"the port rule reaches port {top}: ports stop at 65535",
                            doc.where(("port",)), "lower port.base or port.span (base + span "
                            "must stay within 65535)")
    from . import containers
    containers.check_site(site, doc.where)
    if site.gpu_type is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", site.gpu_type):
        raise HpctrainError(f"gpu_type {site.gpu_type!r} is not a GPU type name",
                            doc.where(("gpu_type",)), "letters, digits, '_', '.', '-': e.g. a100")
    if site.module_init is not None and not site.module_init.strip():
        raise HpctrainError("module_init is empty", doc.where(("module_init",)),
                            "name the file that defines `module`, e.g. "
                            "/usr/share/lmod/lmod/init/bash, or remove the key")
    from .sbatch_options import check_site as check_forbid
    check_forbid(site, doc.where)
    _setup_lines(site.setup, doc.where)


def _setup_lines(lines: list[str], where) -> None:
    """Each setup line runs as one command (parts/environment.sh.j2): a trailing backslash
    would join it to the script's next line."""
    for i, line in enumerate(lines):
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            raise HpctrainError(f"setup line {i + 1} ends with '\\', which would join it to the "
                                "next line of the script", where(("setup", i)),
                                "give each setup line whole, as its own list entry")


def check(spec: JobSpec, site: SiteProfile, where: Origins) -> list[str]:
    """Every check of a job on its site; returns the warnings (each once)."""
    from ..backends import backend_class
    from ..libraries import LIBRARIES, adapter
    cwd = os.getcwd()
    if _CONTROL.search(cwd):
        raise HpctrainError(f"the current directory {cwd!r} holds a control character; jobs run "
                            "from the directory they are submitted from",
                            fix="submit from a directory whose path has none")
    if spec.library not in LIBRARIES:
        raise HpctrainError(f"unknown library '{spec.library}'", where(("library",)),
                            did_you_mean(spec.library, LIBRARIES))
    scheduler = backend_class(site.scheduler)
    warnings: list[str] = []
    _resources(spec, site, scheduler, where, warnings)
    for name in spec.secrets:
        if name in spec.env or name in site.env:
            raise HpctrainError(f"'{name}' is both a secret and a value in env: a secret's value "
                                "must never be written into the script", where(("secrets",)),
                                f"remove {name} from env; it is passed from your environment")
    _setup_lines(spec.setup, where)
    if spec.python is not None:
        try:
            words = shlex.split(spec.python)
        except ValueError as exc:
            raise HpctrainError(f"'python' is not a valid command: {exc}", where(("python",)),
                                'e.g. python: "isaaclab.sh -p"') from None
        if not words:
            raise HpctrainError("'python' is empty", where(("python",)), "e.g. python: python3")
    if spec.idle_gpus is not None and not spec.sample_every:
        # The idle stop judges the sampler's readings (rank/during/sampler.py): with no sampling it
        # would never act, and a job that asked for it must not run believing it is guarded.
        raise HpctrainError(
            f"'idle_gpus' is set but 'sample_every' is 0 ({where(('sample_every',))}): the "
            "idle-GPU stop judges the GPU samples, so it would never act",
            where(("idle_gpus",)),
            "give sample_every a number of seconds (e.g. sample_every: 5, the default), or "
            "remove idle_gpus (idle_gpus: null drops a site's)")
    if scheduler.preemption:
        _preemption(spec, where)
    if spec.resources.spare_nodes:
        _spares(spec, site, scheduler, where)
        if spec.resources.spare_nodes > spec.preemption.max_excluded_nodes:
            # A spare replaces only a node the run leaves out (rank/end/recovery.py's cap).
            warnings.append(
                f"{where(('resources', 'spare_nodes'))}: {spec.resources.spare_nodes} spare(s) but "
                f"preemption.max_excluded_nodes={spec.preemption.max_excluded_nodes}: a spare takes "
                "only the place of a node left out, so at most "
                f"{spec.preemption.max_excluded_nodes} can be used; raise max_excluded_nodes")
    if scheduler.writes_directives:
        _directive_values(spec, site, where)
        from .sbatch_options import check as check_options
        warnings += check_options(spec.sbatch, site, where, where.site)
    elif any(v is not None and v is not False for v in spec.sbatch.values()):
        warnings.append(f"{where(('sbatch',))}: site '{site.name}' has no scheduler: its "
                        "'sbatch' options are left out")
    warnings += scheduler.check_job(spec, site, where)
    lib = adapter(spec.library)
    warnings += lib.check(spec, site, where)
    from . import containers
    warnings += containers.check(spec, site, scheduler, where, runs_isaaclab(lib, spec))
    if spec.health.enabled and lib.launcher == "tasks" and (
            spec.resources.nodes < 2 or spec.launcher.preflight is False):
        warnings.append(f"{where(('health', 'enabled'))}: with the {spec.library} library the "
                        "health gate runs in the node check of multi-node jobs (launcher."
                        "preflight): this job's nodes are not checked")
    if spec.health.allreduce_min_gbps is not None and spec.resources.nodes > 1 \
            and spec.launcher.preflight is False:
        warnings.append(f"{where(('launcher', 'preflight'))}: the network floor (health."
                        "allreduce_min_gbps) is measured after the node check: with it off, "
                        "this job's network is not measured")
    return list(dict.fromkeys(warnings))


def isaaclab_release(spec: JobSpec, where: Origins) -> tuple[JobSpec, list[str]]:
    """The job with the Isaac Lab release its install says (job/isaaclab.py), and warnings."""
    from ..libraries import LIBRARIES, adapter
    if spec.library not in LIBRARIES or not spec.isaaclab:
        return spec, []
    from .isaaclab import resolve
    spec, warnings, _ = resolve(spec, where, runs_isaaclab(adapter(spec.library), spec))
    return spec, warnings


def runs_isaaclab(lib, spec: JobSpec) -> bool:
    """The job runs Isaac Lab's own train.py (Isaac Sim inside)."""
    return bool(getattr(lib, "isaaclab_mode", None)) and lib.isaaclab_mode(spec)


# ----------------------------------------------------------------------------- resources

def mem_mb(text: str) -> int:
    """Slurm's memory size (MB when no unit) -> MB."""
    unit = text[-1].upper() if text[-1].isalpha() else "M"
    number = int(text[:-1] if text[-1].isalpha() else text)
    return {"K": number // 1024, "M": number, "G": number * 1024, "T": number * 1024 * 1024}[unit]


def fill_resources(spec: JobSpec, site: SiteProfile, where: Origins) -> tuple[JobSpec, list[str]]:
    """CPUs and memory per rank that neither the job nor its site gave: what the library says a
    rank needs (libraries/*: rank_needs), within the site's limits, else 1 CPU and the site's
    memory default. A job (or site) asking for less than the library's need gets a warning with
    the numbers. Returns the job with cpus_per_proc set, and the warnings."""
    from ..libraries import LIBRARIES, adapter
    r, lim = spec.resources, site.limits
    warnings: list[str] = []
    if r.mem is not None and r.mem_per_cpu is not None:
        raise HpctrainError(
            f"'resources.mem' ({r.mem}, {where(('resources', 'mem'))}) and "
            f"'resources.mem_per_cpu' ({r.mem_per_cpu}) are both set: Slurm takes one",
            where(("resources", "mem_per_cpu")),
            "keep one; in a job, 'mem: null' drops a site's default mem")
    needs = adapter(spec.library).rank_needs(spec) if spec.library in LIBRARIES else None
    ppn = procs_per_node(spec)
    cpus, mem_per_cpu = r.cpus_per_proc, r.mem_per_cpu
    if needs is None:
        cpus = cpus or 1
    elif cpus is None:
        cpus = needs.cpus
        if lim.cpus_per_node is not None and ppn * cpus > lim.cpus_per_node:
            cpus = max(1, lim.cpus_per_node // ppn)
            warnings.append(
                f"{spec.library}: each rank gets {cpus} CPU(s) ({ppn} ranks on site "
                f"'{site.name}' nodes of {lim.cpus_per_node} CPUs), fewer than the {needs.cpus} "
                f"that {needs.source} gives a rank")
    elif cpus < needs.cpus:
        warnings.append(
            f"{where(('resources', 'cpus_per_proc'))}: {spec.library} ranks get "
            f"{cpus} CPU(s) each (resources.cpus_per_proc), but {needs.source} gives a rank "
            f"{needs.cpus}: the simulator would starve. Fix: cpus_per_proc: {needs.cpus} "
            "(or leave it out)")
    if needs is not None:
        need_mb = mem_mb(needs.mem_per_cpu)
        rank_mb = need_mb * cpus
        skip = {"mem", "mem-per-cpu"} & set(site.sbatch_skip)
        if r.mem is not None:
            if mem_mb(r.mem) < ppn * rank_mb:
                warnings.append(
                    f"{where(('resources', 'mem'))}: {spec.library}: resources.mem={r.mem} per "
                    f"node gives each of {ppn} rank(s) {mem_mb(r.mem) // ppn} MB, but "
                    f"{needs.source} gives a rank {cpus} x {need_mb} MB = {rank_mb} MB. Fix: "
                    f"mem: {(ppn * rank_mb + 1023) // 1024}G, or mem_per_cpu: {needs.mem_per_cpu} "
                    "instead")
        elif mem_per_cpu is not None:
            if mem_mb(mem_per_cpu) < need_mb:
                warnings.append(
                    f"{where(('resources', 'mem_per_cpu'))}: {spec.library}: "
                    f"resources.mem_per_cpu={mem_per_cpu} is less than the {needs.mem_per_cpu} "
                    f"per CPU of {needs.source}. Fix: mem_per_cpu: {needs.mem_per_cpu}")
        elif not skip:
            mem_per_cpu = needs.mem_per_cpu
            if lim.mem_per_node is not None and ppn * cpus * need_mb > mem_mb(lim.mem_per_node):
                mem_per_cpu = f"{max(1, mem_mb(lim.mem_per_node) // (ppn * cpus))}M"
                warnings.append(
                    f"{spec.library}: each CPU gets {mem_per_cpu} (site '{site.name}' nodes "
                    f"have {lim.mem_per_node}), less than the {needs.mem_per_cpu} of "
                    f"{needs.source}")
    if lim.mem_per_node is not None and r.mem is not None and mem_mb(r.mem) > mem_mb(lim.mem_per_node):
        raise HpctrainError(f"'resources.mem' is {r.mem}, but site '{site.name}' nodes have "
                            f"{lim.mem_per_node}", where(("resources", "mem")),
                            f"ask for {lim.mem_per_node} or less")
    filled = msgspec.structs.replace(r, cpus_per_proc=cpus, mem_per_cpu=mem_per_cpu)
    return msgspec.structs.replace(spec, resources=filled), warnings


def _resources(spec, site, scheduler, where, warnings) -> None:
    r, lim = spec.resources, site.limits
    ppn = procs_per_node(spec)

    def over(key: str, value, limit, unit: str, fix: str):
        if limit is not None and value > limit:
            raise HpctrainError(f"'resources.{key}' is {value}, but site '{site.name}' allows at "
                                f"most {limit} {unit}", where(("resources", key)), fix)

    if scheduler.max_nodes is not None and r.nodes > scheduler.max_nodes:
        raise HpctrainError(
            f"site '{site.name}' runs on this machine only, so 'resources.nodes' must be "
            f"{scheduler.max_nodes} (got {r.nodes})", where(("resources", "nodes")),
            "use a cluster site (--site NAME) for several nodes, or set nodes: 1")
    over("nodes", r.nodes, lim.max_nodes, "nodes", f"ask for {lim.max_nodes} nodes or fewer")
    over("gpus_per_node", r.gpus_per_node, lim.max_gpus_per_node, "GPUs per node",
         "the nodes do not have that many GPUs")
    over("procs_per_node", ppn, lim.max_procs_per_node, "ranks per node", "start fewer ranks per node")
    if lim.cpus_per_node is not None and ppn * r.cpus_per_proc > lim.cpus_per_node:
        raise HpctrainError(
            f"{ppn} ranks x {r.cpus_per_proc} CPUs = {ppn * r.cpus_per_proc} CPUs per node, but "
            f"site '{site.name}' nodes have {lim.cpus_per_node}",
            where(("resources", "cpus_per_proc")),
            f"lower cpus_per_proc to {max(1, lim.cpus_per_node // ppn)} or procs_per_node")
    if lim.max_time and slurm_seconds(r.time) > slurm_seconds(lim.max_time):
        raise HpctrainError(f"'resources.time' {r.time} is longer than site '{site.name}' allows "
                            f"({lim.max_time})", where(("resources", "time")),
                            f"use {lim.max_time} or less; preemption+requeue continues longer runs")
    if slurm_seconds(r.time) < 1:
        raise HpctrainError("'resources.time' must be at least one minute",
                            where(("resources", "time")), 'e.g. time: "00:30:00"')
    if r.gpus_per_node and ppn > r.gpus_per_node:
        # NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU detected"),
        # and only after every rank has started: said here, before anything is queued.
        raise HpctrainError(
            f"{ppn} ranks per node but {r.gpus_per_node} GPU(s) per node: each rank of a GPU job "
            "needs a GPU of its own (NCCL cannot put two ranks on one GPU)",
            where(("resources", "procs_per_node")),
            f"set procs_per_node: {r.gpus_per_node} (or leave it out: it follows gpus_per_node), "
            f"or gpus_per_node: {ppn}; to run {ppn} ranks on CPU, gpus_per_node: 0")
    if r.gpus_per_node and ppn < r.gpus_per_node:
        warnings.append(f"{r.gpus_per_node - ppn} of {r.gpus_per_node} GPUs per node stay idle "
                        f"(procs_per_node={ppn})")


def _spares(spec: JobSpec, site: SiteProfile, scheduler, where: Origins) -> None:
    """Spare nodes live in a Slurm allocation (or are an ssh site's hosts after the job's) and
    are swapped in by the batch shell's recovery (templates/slurm/requeue.sh.j2,
    templates/ssh/spares.sh.j2, rank/before/spares.py): refused where that cannot happen."""
    key = where(("resources", "spare_nodes"))
    k = spec.resources.spare_nodes
    if scheduler.no_spares:
        raise HpctrainError(
            f"'resources.spare_nodes' is {k}, but site '{site.name}' (scheduler "
            f"{scheduler.name}) cannot keep spare nodes: {scheduler.no_spares}", key,
            "remove resources.spare_nodes, or use a Slurm site or an ssh site with more hosts")
    if not (spec.preemption.enabled and spec.preemption.requeue):
        raise HpctrainError(
            f"'resources.spare_nodes' is {k}, but preemption.enabled or preemption.requeue is "
            "false: a spare takes a failed node's place in the batch shell's recovery after a "
            "failure, which that turns off", key,
            "remove resources.spare_nodes, or leave preemption.enabled and preemption.requeue on")
    if site.head.mode == "interface":
        raise HpctrainError(
            f"'resources.spare_nodes' is {k}, but site '{site.name}' finds the rendezvous head "
            "by an interface address of the batch shell's node (head.mode: interface): with "
            "spares the head is the first node chosen, which need not be that node", key,
            "use head.mode nodename or suffix on this site, or remove resources.spare_nodes")
    limit = site.limits.max_nodes
    if limit is not None and spec.resources.nodes + k > limit:
        raise HpctrainError(
            f"resources.nodes + resources.spare_nodes = {spec.resources.nodes + k}, but site "
            f"'{site.name}' allows at most {limit} nodes", key,
            f"ask for {max(0, limit - spec.resources.nodes)} spare(s) or fewer")


def spare_cost(spec: JobSpec) -> str:
    """What the spares cost, for validate: they are allocated, and charged, for the whole time."""
    r = spec.resources
    hours = slurm_seconds(r.time) / 3600
    total = r.nodes + r.spare_nodes
    per_node = f" x {r.gpus_per_node} GPU(s) per node" if r.gpus_per_node else ""
    amount = hours * total * (r.gpus_per_node or 1)
    spare = hours * r.spare_nodes * (r.gpus_per_node or 1)
    what = "GPU-hours" if r.gpus_per_node else "node-hours"
    return (f"{r.spare_nodes} idle beside {r.nodes}: ({r.nodes}+{r.spare_nodes}) nodes x "
            f"{r.time}{per_node} = {amount:.4g} {what} at most, {spare:.4g} of them "
            "for the spares")


def _preemption(spec: JobSpec, where: Origins) -> None:
    """Only where the scheduler signals ahead of the limit, and only when preemption is on."""
    p = spec.preemption
    if not p.enabled:
        return
    limit = slurm_seconds(spec.resources.time)
    if p.grace >= p.lead_time:
        raise HpctrainError(
            f"preemption.grace ({p.grace} s) is not shorter than preemption.lead_time "
            f"({p.lead_time} s): Slurm would kill the job before the ranks finished saving",
            where(("preemption", "grace")), f"e.g. preemption.lead_time: {p.grace + 60}")
    if p.lead_time >= limit:
        raise HpctrainError(
            f"preemption.lead_time ({p.lead_time} s) is not shorter than the time limit "
            f"resources.time={spec.resources.time} ({limit} s)",
            where(("preemption", "lead_time")),
            "lengthen resources.time or shorten preemption.lead_time")


def _directive_values(spec: JobSpec, site: SiteProfile, where: Origins) -> None:
    """Values that become scheduler directives: sbatch splits them at whitespace and reads
    double quotes and backslashes itself, so they hold none (a `'` is quoted: backends/slurm/backend.py)."""
    r = spec.resources
    for key in ("partition", "account", "qos", "constraint"):
        value = getattr(r, key)
        if value is not None and not _RESOURCE_VALUE.fullmatch(value):
            raise HpctrainError(f"'resources.{key}' {value!r} holds spaces, double quotes, "
                                "backslashes or control characters, which a scheduler directive "
                                "cannot carry",
                                where(("resources", key)), "use the name as the scheduler lists it")
    runs = os.path.abspath(spec.runs_dir or os.environ.get("HPCTRAIN_RUNS_DIR") or "runs")
    if not _DIRECTIVE_VALUE.fullmatch(runs.replace("/", "_")) or any(c in runs for c in "\"'\\%"):
        raise HpctrainError(f"the runs directory {runs!r} holds spaces, quotes, '%' or control "
                            "characters: Slurm's --output directive cannot name a log file there",
                            where(("runs_dir",)), "choose a runs_dir without them")


def check_secrets(job) -> None:
    """Secrets are passed by name from where the job is submitted: each must be set here, or the
    job would fail on the nodes after waiting in the queue."""
    missing = [n for n in job.spec.secrets if not os.environ.get(n)]
    if missing:
        where = job.origins(("secrets",)) if job.origins is not None else job.source
        raise HpctrainError(f"secret(s) {', '.join(missing)} not set in this environment: the job "
                            "takes them from where it is submitted", where,
                            f"export {missing[0]}=... before submitting (in Python: "
                            "os.environ[...]); its value is never written to disk")


# ----------------------------------------------------------------------------- sweeps

# Keys whose change would change the allocation or the run's identity.
SWEEP_FIXED = ("resources", "site", "name", "sweep", "runs_dir", "preemption", "python")


def check_sweep(spec: JobSpec, site: SiteProfile, where: Origins) -> int:
    """A sweep's shape, before it is expanded; returns its number of tasks."""
    sweep = spec.sweep
    n = 1
    for key, values in sweep.grid.items():
        n *= len(values)
        if not values:
            raise HpctrainError(f"sweep.grid.{key} has no values", where(("sweep", "grid", key)),
                                "give it a list of values, or remove it")
        top = key.split(".")[0]
        if top in SWEEP_FIXED:
            raise HpctrainError(f"the sweep varies '{key}', which must be the same for every "
                                "task of a job array", where(("sweep", "grid", key)),
                                _fixed_fix(key))
    if sweep.variants:
        n *= len(sweep.variants)
        for i, variant in enumerate(sweep.variants):
            for key in variant:
                if key.split(".")[0] in SWEEP_FIXED:
                    raise HpctrainError(f"the sweep varies '{key}', which must be the same for "
                                        "every task of a job array",
                                        where(("sweep", "variants", i)), _fixed_fix(key))
    if sweep.seeds:
        n *= len(sweep.seeds)
        dupes = [s for s in dict.fromkeys(sweep.seeds) if sweep.seeds.count(s) > 1]
        if dupes:
            raise HpctrainError(f"sweep.seeds repeats {', '.join(map(str, dupes))}: those tasks "
                                "would be identical", where(("sweep", "seeds")),
                                "list each seed once")
    if not (sweep.grid or sweep.variants or sweep.seeds):
        raise HpctrainError("the sweep is empty", where(("sweep",)),
                            "give it grid, variants or seeds, or remove it")
    limit = array_limit(site)
    if n > limit:
        raise HpctrainError(f"the sweep has {n} tasks, but site '{site.name}' allows arrays of "
                            f"at most {limit}", where(("sweep",)),
                            "split it into several job files or shrink the grid")
    return n


def array_limit(site: SiteProfile) -> int:
    """The most tasks of one job array on the site: its limits.max_array_size, else Slurm's own
    MaxArraySize default."""
    return site.limits.max_array_size or 1001


def _fixed_fix(key: str) -> str:
    if key.split(".")[0] == "resources":
        return ("an array shares one allocation: submit a separate job per resource size "
                "(e.g. --set resources.nodes=N)")
    return f"remove '{key}' from the sweep"


def sweep_points(sweep) -> list[dict]:
    """The sweep's points as {key.path: value} dicts, in task order: grid-major (the last grid
    key varies fastest), then variants, then seeds."""
    keys = list(sweep.grid)
    points = [dict(zip(keys, combo)) for combo in itertools.product(*(sweep.grid[k] for k in keys))]
    if sweep.variants:
        points = [{**p, **v} for p in points for v in sweep.variants]
    if sweep.seeds:
        points = [{**p, "seed": s} for p in points for s in sweep.seeds]
    return points


# ----------------------------------------------------------------------------- this machine's GPUs

def local_gpus(environ=None) -> tuple[int | None, str]:
    """How many GPUs a job started here can use, and how that was learned: CUDA_VISIBLE_DEVICES
    when it is set (it hides the others from every rank), else `nvidia-smi -L`; (None, why)
    when neither can say."""
    import shutil
    import subprocess
    env = os.environ if environ is None else environ
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        # CUDA stops at the first invalid entry ("-1" hides every GPU)
        count = next((i for i, v in enumerate(ids) if v.startswith("-")), len(ids))
        return count, f"CUDA_VISIBLE_DEVICES={visible!r}"
    smi = shutil.which("nvidia-smi", path=env.get("PATH"))
    if smi is None:
        return 0, "no nvidia-smi on PATH"
    from ..rank import tools
    try:  # bounded: an nvidia-smi that prints without end is stopped at the cap
        out = tools.run([smi, "-L"], timeout=30, limit=1 << 20)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"nvidia-smi -L failed: {exc}"
    stdout = out.stdout.decode("utf-8", "replace")
    if out.returncode != 0:
        said = clean(" ".join((stdout + out.stderr.decode("utf-8", "replace")).split()))
        return 0, f"nvidia-smi -L failed (exit {out.returncode}): {said or 'no output'}"
    count = sum(1 for line in stdout.splitlines() if re.match(r"GPU \d+: ", line))
    return count, "nvidia-smi -L"


def check_local_gpus(job, environ=None) -> None:
    """At submit on this machine (the local site): a GPU job asks for no more GPUs than are
    here; on a machine without one, how to run it on CPU."""
    r = job.spec.resources
    if not r.gpus_per_node:
        return
    have, how = local_gpus(environ)
    if have is None or have >= r.gpus_per_node:
        return
    where = job.origins(("resources", "gpus_per_node")) if job.origins is not None else job.source
    ppn = procs_per_node(job.spec)
    if have == 0:
        raise HpctrainError(
            f"the job asks for {r.gpus_per_node} GPU(s) per node, and this machine has none "
            f"({how})", where,
            f"run it on CPU: --set resources.gpus_per_node=0 --set resources.procs_per_node={ppn} "
            "(the ranks use gloo; cpu_mode: auto adapts the RL libraries), or submit it to a GPU "
            "site (--site NAME)")
    raise HpctrainError(
        f"the job asks for {r.gpus_per_node} GPU(s) per node, and this machine has {have} "
        f"({how})", where,
        f"ask for {have}: --set resources.gpus_per_node={have} (procs_per_node follows it), or "
        "submit it to a site whose nodes have more (--site NAME)")

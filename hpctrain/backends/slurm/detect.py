"""`hpctrain site detect NAME`: a site profile written from what a Slurm cluster says.

Evidence, gathered on a login node: `scontrol show config` (select plugin, GRES types,
preemption, MaxArraySize, KillWait), `sinfo` (the partition's time limit, nodes, CPUs, memory,
GRES), and one short job on two nodes running rank/before/probe.py: each node's interfaces, InfiniBand
devices, what the first node's name resolves to on each node, the interpreter, nvidia-smi,
`module` — then whether the second node reaches the first on a port of the rendezvous range, by
its name, name+suffix, and each of its addresses.

decide() turns evidence into keys, each with the comment that says why; what it cannot decide
is marked `TODO` for the user. Nothing here guesses silently: the profile shows its reasons.

The tools' answers are untrusted text (a cluster's name, a version, a partition, what a node
says of itself): read in, each is one printable line (said(): escapes, newlines and other
controls become '?'); a comment line is made printable again as it is written; and a value only
becomes a key when the schema and the site checks take it, else a TODO. A profile site detect
writes always loads.
"""
from __future__ import annotations

import datetime as _dt
import re
import shlex
import shutil
import sys
import time
from pathlib import Path

import yaml

from ...errors import HpctrainError
from ... import rank
from ...rank.printable import clean, printable
from ...schema.spec import MAX_COUNT
from .. import commands

PORT_BASE, PORT_SPAN = 61000, 4536  # spec.PortRule's defaults: above Linux's ephemeral range
LMOD_INIT = "/usr/share/lmod/lmod/init/bash"


# ----------------------------------------------------------------------------- evidence

def said(value, bound: int = 120) -> str:
    """A tool's text as the profile may show it: one printable line, at most `bound`
    characters ('' for nothing)."""
    return clean(value, bound) or ""


_COUNT = re.compile(r"[0-9]{1,9}")  # ASCII digits only: "²".isdigit() is True, int("²") fails


def count(text: str) -> int | None:
    """A whole number a tool printed, or None."""
    return int(text) if _COUNT.fullmatch(text) else None


def scontrol_config(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = said(value, 200)
    return out


_VERSION = re.compile(r"slurm(?:-wlm)? ([0-9]{1,3}\.[0-9]{1,2}\.[0-9]{1,3}(?:-[0-9A-Za-z.]{1,20})?)", re.ASCII)


def slurm_version(text: str) -> str | None:
    """`scontrol --version` ("slurm 24.11.5", Debian's "slurm-wlm 22.05.8") -> "24.11.5"; None
    for anything else (the tool's output is untrusted)."""
    m = _VERSION.fullmatch(text.strip()[:100])
    return m.group(1) if m else None


SINFO_FORMAT = "%P|%l|%D|%c|%m|%G|%N|%f"
MAX_PARTITIONS = 256  # sinfo lines read: a cluster's partitions and node groups


def sinfo_partitions(text: str) -> dict[str, dict]:
    """sinfo lines (SINFO_FORMAT; one per partition and node group; without the features, as
    older captures have them, too) -> per partition: default, time limit, node count, min CPUs
    and memory of its nodes, GPU counts and types, node features."""
    parts: dict[str, dict] = {}
    for line in text.splitlines()[:MAX_PARTITIONS * 4]:
        cells = [said(cell, 200) for cell in line.strip().split("|")]
        if len(cells) not in (7, 8):
            continue
        name, limit, nodes_in, cpus, mem, gres, nodes = cells[:7]
        default = name.endswith("*")
        name = name.rstrip("*")
        if name not in parts and len(parts) >= MAX_PARTITIONS:
            continue
        p = parts.setdefault(name, {"default": False, "time": limit, "nodes": 0, "cpus": [],
                                    "mem_mb": [], "gpus": [], "gpu_types": set(), "nodelist": [],
                                    "features": set()})
        p["features"].update(f for f in (cells[7] if len(cells) == 8 else "").split(",")[:32] if f)
        p["default"] |= default
        p["nodes"] += count(nodes_in) or 0
        p["cpus"].append(count(re.sub(r"[^0-9].*", "", cpus)) or 0)
        p["mem_mb"].append(count(re.sub(r"[^0-9].*", "", mem)) or 0)
        p["nodelist"].append(nodes)
        gpus = 0
        for item in gres.split(","):
            m = re.match(r"gpu(?::([^:(]+))?:([0-9]{1,9})", item.strip())
            if m:
                gpus += int(m.group(2))
                if m.group(1):
                    p["gpu_types"].add(m.group(1))
        p["gpus"].append(gpus)
    return parts


# sinfo's %l, in Slurm's time forms: minutes, minutes:seconds, hours:minutes:seconds,
# days-hours, days-hours:minutes, days-hours:minutes:seconds.
_SINFO_TIME = re.compile(r"(?:(\d{1,5})-)?(\d{1,2})(?::(\d{1,2}))?(?::(\d{1,2}))?", re.ASCII)


def slurm_time(limit: str) -> str | None:
    """sinfo's time limit (1-00:00:00, 2:00:00, 30:00, infinite) as the site's SlurmTime; None
    for no limit. ValueError for anything else (sinfo's text is not trusted to be well formed)."""
    if limit in ("infinite", "n/a", "UNLIMITED", ""):
        return None
    m = _SINFO_TIME.fullmatch(limit)
    if m is None:
        raise ValueError(limit)
    days, first, second, third = (int(g) if g else 0 for g in m.groups())
    if m.group(1) is not None or m.group(4) is not None:  # [days-]hours[:minutes[:seconds]]
        h, mins, secs = first, second, third
    else:  # minutes[:seconds]
        h, mins, secs = 0, first, second
    total = ((days * 24 + h) * 60 + mins) * 60 + secs
    return f"{total // 3600:02d}:{total % 3600 // 60:02d}:{total % 60:02d}"


def probe_script(python: list[str], rank_dir: Path, out: Path) -> str:
    """The batch script of the probe job: facts from every node, then reachability."""
    py = shlex.join(python)
    rank = shlex.quote(str(rank_dir))
    o = shlex.quote(str(out))
    return f"""#!/bin/bash
# hpctrain site detect: what two nodes say about themselves and each other (rank/before/probe.py).
set -u
FIRST=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
HPCTRAIN_PROBE_MODULE=$(type -t module || true)
export HPCTRAIN_PROBE_MODULE
STEP="srun --nodes=$SLURM_JOB_NUM_NODES --ntasks=$SLURM_JOB_NUM_NODES --ntasks-per-node=1"
$STEP {py} {rank} probe facts --resolve "$FIRST" >{o}/facts.jsonl 2>{o}/facts.err
PORT=$(( {PORT_BASE} + 2 * (SLURM_JOB_ID % {PORT_SPAN // 2}) ))
echo "$PORT" >{o}/port
$STEP {py} {rank} probe reach "$FIRST" {o}/facts.jsonl "$PORT" 20 >{o}/reach.jsonl 2>{o}/reach.err
echo done >{o}/done
"""


def run_probe(python: list[str], partition: str | None, nodelist: str | None, where: Path,
              timeout: float = 600) -> dict:
    """Submit the probe job, wait for it, and return its evidence."""
    where.mkdir(parents=True, exist_ok=True)
    rank_dir = where / "rank"
    if rank_dir.exists():
        shutil.rmtree(rank_dir)
    for old in ("done", "facts.jsonl", "reach.jsonl", "port"):  # a previous detect's answers
        (where / old).unlink(missing_ok=True)
    shutil.copytree(Path(rank.__file__).parent, rank_dir,
                    ignore=shutil.ignore_patterns("__pycache__"))
    script = where / "probe.sbatch"
    script.write_text(probe_script(python, rank_dir, where))
    cmd = ["sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=1", "--time=00:05:00",
           "--job-name=hpctrain-detect", f"--output={where / 'probe.out'}"]
    cmd += [f"--partition={partition}"] if partition else []
    cmd += [f"--nodelist={nodelist}"] if nodelist else []
    job = commands.run(cmd + [str(script)]).strip().split(";")[0]
    deadline = time.monotonic() + timeout
    done = where / "done"  # the script's last line writes it: every output is complete
    while time.monotonic() < deadline:
        if done.exists():
            break
        if not commands.run(["squeue", "-h", "-j", job, "-o", "%T"], timeout=30).strip():
            time.sleep(2.0)  # ended: give a shared file system a moment to show its files
            break
        time.sleep(1.0)
    else:
        commands.run(["scancel", job])
        raise HpctrainError(f"the probe job {job} did not end within {timeout:.0f} s",
                            fix="is the partition busy? run again with --partition NAME, or "
                            "--no-probe to write the profile from scontrol/sinfo alone")
    facts = _jsonl(where / "facts.jsonl")
    reach = _jsonl(where / "reach.jsonl")
    if not facts:
        err = (where / "facts.err").read_text() if (where / "facts.err").exists() else ""
        out = (where / "probe.out").read_text() if (where / "probe.out").exists() else ""
        raise HpctrainError(f"the probe job {job} reported nothing: {(err + out).strip()[-800:]}",
                            fix="check that the interpreter given with --python exists on the "
                            "nodes and that the run directory's file system is shared")
    port = (where / "port").read_text().strip() if (where / "port").exists() else None
    return {"job": job, "facts": facts, "reach": reach, "port": int(port) if port else None}


def _jsonl(path: Path) -> list[dict]:
    from ...rank.before.probe import read_records
    try:
        return read_records(path.read_text())
    except OSError:
        return []


# ----------------------------------------------------------------------------- decisions

class Profile:
    """YAML lines with a comment above each key: the evidence for it."""

    def __init__(self):
        self.lines: list[str] = []
        self.todo: list[str] = []

    def comment(self, text: str, indent: int = 0) -> None:
        # Split at this module's own line breaks only, and each line made printable: a tool's
        # text inside can neither start a line of YAML nor hold a character YAML refuses.
        for line in text.split("\n"):
            self.lines.append(" " * indent + ("# " + printable(line)).rstrip())

    def key(self, path: str, value, why: str = "", indent: int = 0) -> None:
        if why:
            self.comment(why, indent)
        dumped = yaml.safe_dump({path: value}, default_flow_style=True, width=1000).strip()
        self.lines.append(" " * indent + dumped[1:-1] if dumped.startswith("{") else dumped)

    def block(self, name: str) -> None:
        self.lines.append(f"{name}:")

    def mark(self, text: str) -> None:
        text = printable(text)  # the command prints it too
        self.todo.append(text)
        self.comment(f"TODO: {text}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def decide(name: str, config: dict, parts: dict, partition: str | None, probe: dict | None,
           python: list[str]) -> tuple[str, list[str]]:
    """The profile's text and what it left to the user."""
    config = {key: said(value, 200) for key, value in config.items()}  # as scontrol_config reads
    out = Profile()
    if partition is None:
        partition = next((p for p, v in parts.items() if v["default"]), None) or \
            next(iter(parts), None)
    part = parts.get(partition or "", None)
    cluster = config.get("ClusterName", "?")
    out.comment(f"{name} — written by `hpctrain site detect` on {_dt.date.today().isoformat()} "
                f"from cluster '{cluster}'\n(Slurm {config.get('SLURM_VERSION', '?')}).")
    out.comment("Each key says what it was decided from. Check the TODO lines, then run\n"
                f"  hpctrain doctor --site {name}")
    out.key("name", name)
    out.key("description", f"Slurm cluster {cluster}, partition {partition} (site detect)")
    out.key("scheduler", "slurm")
    version = config.get("SLURM_VERSION", "")
    if re.fullmatch(r"[0-9]{1,3}\.[0-9]{1,2}\.[0-9]{1,3}", version, re.ASCII):
        out.key("slurm_version", version, "scontrol show config: SLURM_VERSION (doctor compares "
                "it with the release the cluster runs then)")
    select = config.get("SelectType", "")
    gres_types = config.get("GresTypes", "(null)")
    gpus = max(part["gpus"]) if part else 0
    if gpus:
        mode = "gres" if select.endswith("cons_res") else "gpus-per-node"
        out.key("gpu_request", mode, f"GPUs: SelectType={select} GresTypes={gres_types}; "
                + ("select/cons_res has no --gpus-per-node, so --gres=gpu:N" if mode == "gres"
                   else "select/cons_tres takes --gpus-per-node"))
        types = sorted(part["gpu_types"])
        if len(types) == 1 and _GPU_TYPE.fullmatch(types[0]):
            out.key("gpu_type", types[0], f"every GPU node of '{partition}' has GPUs of type {types[0]}")
        elif len(types) == 1:
            out.mark(f"sinfo names the GPU type of '{partition}' {types[0]!r}, which is not a type "
                     "name (letters, digits, '_', '.', '-'): set gpu_type by hand, or leave it out")
        elif types:
            out.mark(f"partition '{partition}' mixes GPU types {', '.join(types)}: set gpu_type "
                     "to the one your jobs need (or leave it out for any)")
    else:
        out.comment(f"no GPUs: sinfo shows no gpu GRES on partition '{partition}' "
                    f"(GresTypes={gres_types}); jobs run on CPU with gloo")
    out.key("cpu_mode", "auto" if gpus else "on",
            "auto: gloo when a rank sees no GPU" if gpus else "no GPU on these nodes: CPU and gloo")

    out.block("limits")
    if part:
        _count(out, "max_nodes", part["nodes"], 1, f"sinfo: {part['nodes']} nodes in '{partition}'")
        _count(out, "cpus_per_node", min(part["cpus"]), 1,
               f"sinfo: CPUs per node {sorted(set(part['cpus']))} (the smallest)")
        if min(part["mem_mb"]) > 0:
            out.key("mem_per_node", f"{min(part['mem_mb'])}M",
                    f"sinfo: memory per node {sorted(set(part['mem_mb']))} MB (RealMemory, the smallest)", 2)
        _count(out, "max_gpus_per_node", gpus, 0,
               f"sinfo: GRES {', '.join(sorted(set(map(str, part['gpus']))))} GPUs per node")
        try:
            limit = slurm_time(part["time"])
        except ValueError:
            limit = False
        if limit is False:
            out.mark(f"sinfo's time limit of '{partition}' is {part['time'][:40]!r}, which is not a "
                     "time: fill in max_time by hand")
        elif limit:
            out.key("max_time", limit, f"sinfo: time limit of '{partition}' is {part['time']}", 2)
        else:
            out.comment(f"no max_time: '{partition}' has no time limit ({part['time']})", 2)
    else:
        out.lines.pop()
        out.mark(f"partition '{partition}' is not in sinfo's answer: fill in limits by hand")
    array = count(config.get("MaxArraySize", ""))
    if array is not None and 1 < array <= MAX_COUNT + 1:
        if part is None:
            out.block("limits")
        out.key("max_array_size", array - 1,
                f"scontrol: MaxArraySize={array} (task ids 0..{array - 1})", 2)

    _gpu_models(out, parts)
    _head(out, probe)
    _modules(out, probe)
    _preemption(out, config)
    _interpreter(out, probe, python)

    if partition and _PARTITION.fullmatch(partition):
        out.block("defaults")
        out.lines.append("  resources:")
        out.key("partition", partition, "the partition described here", 4)
    elif partition:
        out.mark(f"sinfo names the partition {partition!r}, which is not a partition's name "
                 "(letters, digits, '_', '.', '-'): give jobs theirs (resources.partition)")
    return out.text(), out.todo


# The names a profile may hold (job/checks.py takes no other GPU type; a partition and an
# interface are plain names): a tool's text that is none of them (one holding a '?' where it
# held a control character) is left to the user.
_GPU_TYPE = re.compile(r"[A-Za-z0-9_.-]+")
_PARTITION = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_NAME = re.compile(r"[A-Za-z0-9_.:@-]{1,64}")


def _gpu_models(out: Profile, parts: dict) -> None:
    """gpu_models: each partition's GPU models, from sinfo's GRES types and the node features
    that name a model the table knows (a feature such as 'ib' names none): where video jobs
    can go (job/video.py)."""
    from ...rank.before.gpu_models import verdict, verdicts
    found, lines = {}, []
    for name, part in parts.items():
        models = {t for t in part["gpu_types"] if _GPU_TYPE.fullmatch(t) and len(t) <= 64}
        models |= {f for f in part["features"] if _GPU_TYPE.fullmatch(f) and len(f) <= 64
                   and verdict(f).model is not None}
        if not models or not _PARTITION.fullmatch(name):
            continue
        found[name] = sorted(models)[:16]
        renders, each = verdicts(found[name])
        lines.append(f"  {name}: " + "; ".join(v.text() for v in each))
    if not found:
        out.comment("no GPU model in sinfo's GRES types or node features: a job with video: is "
                    "refused until gpu_models names each partition's GPUs (e.g. viz: [l40s])")
        return
    out.key("gpu_models", found, "sinfo: the GPU models of each partition (GRES types, node "
            "features); a job with video: goes only to one whose GPUs all render:\n"
            + "\n".join(lines))


def _count(out: Profile, key: str, value: int, least: int, why: str) -> None:
    """limits.<key> when the schema takes it (least..MAX_COUNT), else a TODO."""
    if least <= value <= MAX_COUNT:
        out.key(key, value, why, 2)
    else:
        out.mark(f"limits.{key}: {why}, which is not a count a site can give "
                 f"({least} to {MAX_COUNT}): fill it in by hand")


def _head(out: Profile, probe: dict | None) -> None:
    if not probe:
        out.mark("no probe job ran (--no-probe): head.mode is Slurm's node name; check with "
                 "hpctrain doctor that other nodes reach it")
        return
    facts = {f["node"]: f for f in probe["facts"]}
    peer = next((r for r in probe["reach"] if r.get("role") == "peer"), None)
    headf = next((f for f in probe["facts"] if peer and f["node"] == peer["head"]), None)
    if peer is None or headf is None:
        out.mark("the probe's reachability step reported nothing (see its probe.out): "
                 "head.mode left to Slurm's node name")
        return
    head, other, port = peer["head"], peer["node"], probe["port"]
    own = next((r for r in headf.get("resolve", []) if r["name"] == head), {})
    results = {r["target"]: r for r in peer["results"]}
    lines = [f"probe job {probe['job']}: {head} (first node) and {other}, port {port}:"]
    lines.append(f"  on {head}: '{head}' -> {own.get('address')}"
                 + (" (loopback!)" if own.get("loopback") else ""))
    for target, r in results.items():
        lines.append(f"  from {other}: {target} -> {r.get('address') or '-'}: "
                     + ("reached" if r["ok"] else r.get("error", "no")))
    ifaces = [i for i in headf.get("interfaces", []) if i.get("ipv4") and not i.get("loopback")]
    lines.append("  interfaces on " + head + ": " + ", ".join(
        f"{i['name']} {i['ipv4']}/{i['prefix']}" for i in ifaces))
    ib = [d["name"] for f in facts.values() for d in f.get("infiniband", [])]
    lines.append("  InfiniBand devices: " + (", ".join(sorted(set(ib))) or "none"))
    evidence = "\n".join(lines)
    out.block("head")
    name_ok = results.get(head, {}).get("ok") and not own.get("loopback")
    # A suffix or interface becomes a key: only names the site's head: section can hold.
    suffixed = [t for t in results if t != head and t.startswith(head) and results[t]["ok"]
                and _NAME.fullmatch(t[len(head):])]
    by_ip = {i["ipv4"]: i["name"] for i in ifaces if _NAME.fullmatch(str(i["name"]))}
    ip_ok = [t for t in results if t in by_ip and results[t]["ok"]]
    if name_ok:
        out.key("mode", "nodename", evidence + f"\n-> nodename: '{head}' resolves to a "
                "network address everywhere and the port was reached through it", 2)
    elif suffixed:
        suffix = suffixed[0][len(head):]
        out.key("mode", "suffix", evidence + f"\n-> suffix '{suffix}': the plain name "
                + ("resolves to loopback on the head" if own.get("loopback") else "was not reached")
                + f", '{suffixed[0]}' was", 2)
        out.key("suffix", suffix, "", 2)
    elif ip_ok:
        iface = by_ip[ip_ok[0]]
        out.key("mode", "interface", evidence + f"\n-> interface {iface}: the plain name "
                + ("resolves to loopback on the head" if own.get("loopback") else "was not reached")
                + f", {ip_ok[0]} on {iface} was", 2)
        out.key("interface", iface, "", 2)
    else:
        out.key("mode", "nodename", evidence, 2)
        out.mark(f"{other} reached {head} on port {port} by no name or address: ask the admins "
                 "which ports are open between compute nodes, set port.base/port.span, and "
                 "choose head.mode")
        return
    if ib:
        out.comment("InfiniBand is there: NCCL finds it by itself; pin a device with "
                    "env: {NCCL_IB_HCA: ...} only if doctor's bandwidth is low")
    out.block("port")
    out.key("base", PORT_BASE, f"port {port} of the range {PORT_BASE}-{PORT_BASE + PORT_SPAN - 1} "
            f"was reachable from {other}", 2)
    out.key("span", PORT_SPAN, "", 2)


def _modules(out: Profile, probe: dict | None) -> None:
    if not probe:
        return
    mods = [f.get("modules", {}) for f in probe["facts"]]
    in_shell = any(m.get("in_shell") for m in mods)
    inits = sorted({p for m in mods for p in m.get("inits", [])})
    if in_shell:
        out.comment("`module` is defined in the batch shell: modules: [...] works without "
                    "module_init")
    elif inits:
        from ...rank.before.probe import MODULE_INITS
        known = [p for p in inits if p in MODULE_INITS]  # the probe's own list: no other path
        if not known:
            out.mark("the nodes report module init files hpctrain does not know: set "
                     "module_init by hand if `module` is needed")
            return
        init = LMOD_INIT if LMOD_INIT in known else known[0]
        out.key("module_init", init, f"`module` is not defined in the batch shell, but the nodes "
                f"have {', '.join(inits)}; {init} is sourced before modules load"
                + (" (/etc/profile.d/lmod.sh dies under set -u without LOGNAME)"
                   if init == LMOD_INIT else ""))
    else:
        out.comment("no module system on the nodes (no `module`, no Lmod/Environment Modules "
                    "init file): list no modules")


def _preemption(out: Profile, config: dict) -> None:
    ptype, pmode = config.get("PreemptType", "?"), config.get("PreemptMode", "?")
    params = config.get("SlurmctldParameters", "") + "," + config.get("PreemptParameters", "")
    signal = "preempt_send_user_signal" in params
    out.comment(f"preemption: PreemptType={ptype} PreemptMode={pmode}; "
                + ("preempt_send_user_signal is set: a preempted job gets its --signal"
                   if signal else "preempt_send_user_signal is not set: a preempted job gets "
                   "SIGTERM only, no --signal")
                + f"; KillWait={config.get('KillWait', '?')} (grace after SIGTERM)")


def _interpreter(out: Profile, probe: dict | None, python: list[str]) -> None:
    if not probe:
        return
    pys = {f["python"]["executable"] + " " + f["python"]["version"] for f in probe["facts"]}
    out.comment(f"interpreter on the nodes: {', '.join(sorted(pys))} (from {shlex.join(python)}); "
                "jobs name theirs with python: in job.yaml")
    smi = [f["gpus"] for f in probe["facts"] if f.get("gpus", {}).get("gpus")]
    if smi:
        names = sorted({g["name"] for s in smi for g in s["gpus"]})
        out.comment(f"nvidia-smi: {', '.join(names)}"
                    + ("; NVLink between GPUs" if any(s.get("nvlink") for s in smi) else ""))


# ----------------------------------------------------------------------------- command

def detect(name: str, out_path: Path, partition: str | None, nodelist: str | None,
           python: list[str] | None, probe: bool, work: Path) -> tuple[str, list[str]]:
    config = scontrol_config(commands.run(["scontrol", "show", "config"]))
    # Every partition: gpu_models says where a video job can go, beside the one described.
    parts = sinfo_partitions(commands.run(["sinfo", "-h", "-o", SINFO_FORMAT]))
    if partition and partition not in parts:
        raise HpctrainError(f"sinfo knows no partition '{partition}'",
                            fix=f"one of: {', '.join(parts) or '(none)'}")
    python = python or [sys.executable]
    evidence = run_probe(python, partition, nodelist, work) if probe else None
    try:
        text, todo = decide(name, config, parts, partition, evidence, python)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        if evidence is None:
            raise
        # The probe's records come from the nodes (rank/before/probe.py's output): records of
        # another shape than it writes are told, not a traceback.
        raise HpctrainError(f"the probe job's records are not what rank/before/probe.py writes "
                            f"({type(exc).__name__}): see {work}",
                            fix="run `hpctrain site detect` again, or with --no-probe to write "
                            "the profile from scontrol and sinfo alone") from None
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(text)
    return text, todo

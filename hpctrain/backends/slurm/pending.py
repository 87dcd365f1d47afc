"""Why a pending Slurm job waits, in plain words, and what helps.

Slurm says why with one word (`Priority`, `QOSMaxGRESPerUser`, `ReqNodeNotAvail, Reserved for
maintenance`). Here it becomes a category (WHY below) with a sentence and the action that helps,
and the facts that make it concrete, each from one more query asked only while some run waits:

- behind other jobs: how many pending jobs of its partition come first, and Slurm's estimated
  start — both from one `squeue --start` for every waiting run's partitions;
- a reservation or maintenance: its name and window (`scontrol -o show reservation`, the ones
  on the nodes of the job's partition: reservations.py);
- a QoS or association limit: which one, and its value where `sacctmgr` can tell (it cannot
  on a cluster without accounting: then that is said, not guessed).

A reason this module does not know is shown as Slurm wrote it (category "other"), never hidden.
Everything read from Slurm is untrusted text: each value is cut to a bound and stripped of
control characters before it is shown or stored (rank/printable.py clean()).
"""
from __future__ import annotations

import re
import time

from .. import commands
from . import reservations
from ...rank.printable import clean
from .reservations import when

# category -> (what it means, what helps). {...} fields are filled in by explain().
WHY = {
    "queue": "behind higher-priority jobs",
    "resources": "waiting for resources",
    "limit": "held by a QoS or association limit",
    "reservation": "a reservation or maintenance holds the nodes",
    "dependency": "waiting for other runs",
    "held": "held",
    "begin": "waiting for its begin time",
    "starting": "just submitted",
    "job": "the job asks for what its partition cannot give",
    "nodes": "the nodes it needs are down, drained or reserved",
    "other": "Slurm's reason",
}

_LIMIT_FIELDS = (  # (reason pattern, sacctmgr field that holds the value, what it limits)
    (r"QOSMaxJobsPerUser", "MaxJobsPU", "running jobs per user"),
    (r"QOSMaxSubmitJob", "MaxSubmitPU", "queued jobs per user"),
    (r"QOSMax\w*PerUser", "MaxTRESPU", "resources per user"),
    (r"QOSMax\w*PerAccount", "MaxTRESPA", "resources per account"),
    (r"QOSMaxWallDuration", "MaxWall", "time limit per job"),
    (r"QOSMax\w*PerJob", "MaxTRES", "resources per job"),
    (r"QOSMax\w*PerNode", "MaxTRESPerNode", "resources per node"),
    (r"QOSGrpJobs", "GrpJobs", "running jobs of the whole QoS"),
    (r"QOSGrpSubmit", "GrpSubmit", "queued jobs of the whole QoS"),
    (r"QOSGrp\w*RunMin", "GrpTRESRunMins", "resource-minutes running in the whole QoS"),
    (r"QOSGrp\w*Min", "GrpTRESMins", "resource-minutes of the whole QoS"),
    (r"QOSGrp", "GrpTRES", "resources of the whole QoS"),
    (r"AssocMaxJobs", "MaxJobs", "running jobs of your association"),
    (r"AssocMaxSubmit", "MaxSubmitJobs", "queued jobs of your association"),
    (r"AssocGrpJobs", "GrpJobs", "running jobs of your account"),
    (r"AssocGrpSubmit", "GrpSubmit", "queued jobs of your account"),
    (r"AssocMaxWall", "MaxWall", "time limit per job of your association"),
    (r"AssocGrp\w*RunMin", "GrpTRESRunMins", "resource-minutes running in your account"),
    (r"AssocGrp\w*Min", "GrpTRESMins", "resource-minutes of your account"),
    (r"AssocGrp", "GrpTRES", "resources of your account"),
    (r"AssocMax", "MaxTRES", "resources per job of your association"),
)

def category(reason: str | None) -> str:
    """Slurm's reason word -> a WHY key."""
    r = reason or ""
    if r in ("", "None"):
        return "starting"
    if r == "Priority":
        return "queue"
    if r == "Resources":
        return "resources"
    if r.startswith(("Dependency", "DependencyNeverSatisfied")):
        return "dependency"
    if r in ("JobHeldUser", "JobHeldAdmin", "JobHoldMaxRequeue") or "held" in r.lower():
        return "held"
    if r == "BeginTime":
        return "begin"
    if r.startswith(("QOS", "Assoc", "MaxMemPer", "JobArrayTaskLimit")) and r not in (
            "QOSNotAllowed",):
        return "limit"
    if "Reserv" in r or "maintenance" in r.lower() or r.startswith("Resv"):
        return "reservation"
    if r.startswith(("Partition", "BadConstraints", "InvalidQOS", "InvalidAccount",
                     "QOSNotAllowed", "AccountNotAllowed")):
        return "job"
    if r.startswith(("ReqNodeNotAvail", "NodeDown")):
        return "nodes"
    return "other"


def _estimate(text: str | None) -> float | None:
    """squeue's %S of a pending job ("2026-11-22T00:51:15", "N/A") -> epoch seconds."""
    text = (text or "").strip()
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", text):
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


# ----------------------------------------------------------------------------- the queue

START_FORMAT = "%i|%P|%Q|%S|%r"


def parse_start(text: str) -> list[dict]:
    """`squeue --start --noheader --format=START_FORMAT` lines -> the pending jobs, each with
    its id, partition(s), priority and Slurm's estimated start (None when it has none)."""
    out = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 5 or not re.fullmatch(r"\d+(_\d+|_\[[\d,%:\-]+\])?", parts[0]):
            continue
        prio = parts[2].strip()
        out.append({"job": parts[0], "partitions": [p for p in parts[1].split(",") if p],
                    "priority": int(prio) if prio.isdigit() else 0,
                    "start": _estimate(parts[3]), "reason": clean(parts[4])})
    return out


def start_line(text: str) -> str | None:
    """`sbatch --test-only`'s answer ("sbatch: Job 12 to start at ... using 2 processors on nodes
    ... in partition ...", alike on 22.05 and 24.11) out of its output, else its last line."""
    lines = [clean(ln, 300) for ln in text.splitlines() if ln.strip()]
    return next((ln for ln in lines if ln and " to start at " in ln), lines[-1] if lines else None)


def ahead(job: str, queue: list[dict]) -> tuple[int | None, float | None]:
    """(pending jobs of its partition that come first, Slurm's estimated start) for one job:
    first means a higher priority, or the same priority and an older job id."""
    base = job.split("_")[0]
    mine = next((q for q in queue if q["job"] == job or q["job"].split("_")[0] == base), None)
    if mine is None:
        return None, None

    def key(q):
        return (-q["priority"], int(q["job"].split("_")[0]))
    first = [q for q in queue if q["job"].split("_")[0] != base
             and set(q["partitions"]) & set(mine["partitions"]) and key(q) < key(mine)]
    return len(first), mine["start"]


def _queue(partitions: set[str]) -> list[dict]:
    words = ["squeue", "--start", "--noheader", f"--format={START_FORMAT}"]
    safe = sorted(p for p in partitions if re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", p))
    if safe:
        words.append("--partition=" + ",".join(safe))
    return parse_start(commands.run(words))


# ----------------------------------------------------------------------------- limits

def limit_of(reason: str) -> tuple[str, str] | None:
    """(sacctmgr field, what it limits) for a QOS*/Assoc* reason."""
    for pattern, field, what in _LIMIT_FIELDS:
        if re.match(pattern, reason):
            return field, what
    return None


def parse_sacctmgr(text: str, field: str) -> str | None:
    """`sacctmgr -n -P show qos NAME format=Name,FIELD`'s first line -> the field's value."""
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= 2 and parts[0].strip():
            return clean(parts[1]) or "(no limit set)"
    return None


def _limit_value(reason: str, qos: str | None, user: str | None) -> dict:
    known = limit_of(reason)
    if known is None:
        return {"name": clean(reason)}
    field, what = known
    out = {"name": clean(reason), "field": field, "limits": what, "value": None}
    if reason.startswith("QOS"):
        if not qos or not re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", qos):
            out["unknown"] = "the job's QoS is not known"
            return out
        out["qos"] = qos
        words = ["sacctmgr", "-n", "-P", "show", "qos", qos, f"format=Name,{field}"]
    else:
        if not user or not re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", user):
            out["unknown"] = "the job's user is not known"
            return out
        words = ["sacctmgr", "-n", "-P", "show", "assoc", f"user={user}", f"format=User,{field}"]
    try:
        out["value"] = parse_sacctmgr(commands.run(words, timeout=15), field)
    except commands.SchedulerError as exc:
        out["unknown"] = f"sacctmgr cannot tell here ({clean(exc.stderr or exc.what, 120)})"
    return out


# ----------------------------------------------------------------------------- the sentence

def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def sentence(why: dict, job: str) -> tuple[str, str]:
    """(what it waits for, what helps) in plain words, from explain()'s facts."""
    cat, raw = why["category"], why.get("reason") or ""
    est = f"; Slurm estimates it starts {why['estimate']}" if why.get("estimate") else \
        "; Slurm has no estimated start yet"
    where = f" in partition {why['partition']}" if why.get("partition") else ""
    if cat == "queue":
        n = why.get("ahead")
        head = (f"behind {_plural(n, 'higher-priority job')}{where}" if n
                else f"behind higher-priority jobs{where}")
        return head + est, ("wait; fewer nodes or a shorter resources.time can start sooner "
                            "through backfill, or a less busy partition")
    if cat == "resources":
        return (f"waiting for resources: first in line{where}, the nodes it needs are busy" + est,
                "wait; fewer nodes or a shorter resources.time can start sooner through backfill")
    if cat == "limit":
        lim = why.get("limit") or {}
        text = f"held by a {'QoS' if raw.startswith('QOS') else 'association'} limit: {raw}"
        if lim.get("limits"):
            text += f" ({lim['limits']}"
            if lim.get("value"):
                text += f", {lim['field']}={lim['value']}"
            text += ")"
        if lim.get("unknown"):
            text += f"; its value: {lim['unknown']}"
        return text, ("wait for your other jobs under this limit to end, or ask for less "
                      "(resources.nodes, resources.time) or another qos")
    if cat == "reservation":
        res = why.get("reservations") or []
        if res:
            return reservations.holding_text(res)
        return f"a reservation or maintenance holds the nodes ({raw})", \
            "wait for it to end (`scontrol show reservation` lists them)"
    if cat == "dependency":
        return "waiting for other runs (below)", "they must end first; `hpctrain status` on them"
    if cat == "held":
        if raw == "JobHeldAdmin":
            return ("held by an administrator", f"ask the cluster's administrators to release "
                    f"it (`scontrol release {job}` needs an operator)")
        return (f"held ({raw})" if raw != "JobHeldUser" else "held by you",
                f"release it: `scontrol release {job}`")
    if cat == "begin":
        return ("waiting for its begin time (a job just requeued waits a moment too)" + est,
                "wait; `scontrol update job " + job + " StartTime=now` starts it earlier")
    if cat == "starting":
        return "just submitted: Slurm has not looked at it yet", "wait a few seconds"
    if cat == "job":
        return (f"the job asks for what its partition cannot give ({raw})",
                "change resources or partition to fit `sinfo`'s limits; it will not start as is")
    if cat == "nodes":
        return (f"the nodes it needs are down, drained or reserved ({raw})",
                "wait for them, or `hpctrain submit` on other nodes/partition")
    return f"{raw}" if raw else "no reason given", "see Slurm's documentation of this reason"


def explain(pending: list[dict]) -> dict[str, dict]:
    """For pending jobs [{job, reason, partition, qos, user}] (all text from Slurm): by job id,
    {category, reason, text, action, ahead, estimate, partition, reservations, limit}. Asks
    squeue --start once, and the reservations and limits only for the runs they hold."""
    out: dict[str, dict] = {}
    if not pending:
        return out
    parts = {p for j in pending for p in (j.get("partition") or "").split(",") if p}
    try:
        queue = _queue(parts)
    except commands.SchedulerError:
        queue = []
    res_text = None
    for j in pending:
        job, reason = str(j["job"]), clean(j.get("reason")) or "None"
        why = {"category": category(reason), "reason": reason,
               "partition": clean(j.get("partition"), 64)}
        n, start = ahead(job, queue)
        why["ahead"], why["estimate"] = n, when(start)
        if why["category"] == "limit":
            why["limit"] = _limit_value(reason, clean(j.get("qos"), 64), clean(j.get("user"), 64))
        if why["category"] in ("reservation", "nodes"):
            try:
                if res_text is None:
                    res_text = commands.run(["scontrol", "-o", "show", "reservation"])
                found = reservations.holding(reservations.parse(res_text),
                                             j.get("partition"), j.get("reservation"))
            except commands.SchedulerError:
                found = []
            why["reservations"] = [r.shown() for r in found]
            if found and why["category"] == "nodes":
                why["category"] = "reservation"
        why["text"], why["action"] = sentence(why, job)
        out[job] = why
    return out

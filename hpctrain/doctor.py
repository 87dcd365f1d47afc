"""`hpctrain doctor [JOB] --site S`: a short check job on two nodes with the job's own settings,
and a verdict per check with the fix for each failure.

The check is the job itself, changed only where it must be: its program is rank/before/check.py (join
the process group, time an all-reduce of several sizes, report device and environment, write to
the checkpoint directory), two nodes, ten minutes, no sweep, no dependencies. Everything else —
site, modules, setup lines, interpreter, launcher, rendezvous address and port, bootstrap, cpu
mode — is what the job would use, so what passes here is what the job will meet.

One setup line is added, run once on every node before the launch (rank/before/probe.py): each node's
facts (what the head's name resolves to there, whether it can write the run directory), then a
gate that stops the job at once, naming the node, when those facts already doom the launch. The
rendezvous itself is judged by the job's own preflight (a blocked port is named there).
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import msgspec

from .backends import backend
from .errors import HpctrainError
from .job.load import Job, load_job
from .rank.before import probe
from .runs.records import Run

CHECK_PROGRAM = Path(__file__).parent / "rank" / "before" / "check.py"
NODES = 2

PASS, FAIL, NOT_RUN = "ok", "FAIL", "not run"


class Check(msgspec.Struct, kw_only=True):
    name: str
    verdict: str  # PASS, FAIL or NOT_RUN
    detail: str
    fix: str = ""


class Report(msgspec.Struct, kw_only=True):
    run_id: str
    run_dir: str
    state: str
    checks: list[Check]
    scheduler: str = ""  # the release the cluster runs, e.g. "Slurm 24.11.5 (...)"

    @property
    def ok(self) -> bool:
        return all(c.verdict == PASS for c in self.checks)

    def text(self) -> str:
        width = max(len(c.name) for c in self.checks)
        lines = [f"doctor run {self.run_id} ({self.state}): {self.run_dir}"]
        if self.scheduler:
            lines.append(f"scheduler: {self.scheduler}")
        for c in self.checks:
            lines.append(f"{c.verdict:>7}  {c.name:<{width}}  {c.detail}")
            if c.fix:
                lines.append(f"{'':>7}  {'':<{width}}  fix: {c.fix}")
        lines.append("all checks passed: submit the job" if self.ok else
                     "some checks failed: fix them, then run doctor again")
        return "\n".join(lines)


def check_job(job: str | None, site: str | None, overrides=()) -> Job:
    """The job turned into its check: same settings, rank/before/check.py as the program."""
    base = load_job(job if job else {"name": "check", "library": "command",
                                     "script": str(CHECK_PROGRAM)},
                    site=site, overrides=overrides)
    runner = backend(base.site.scheduler)
    if runner.every_node("true") is None or runner.first_node is None:
        raise HpctrainError(f"doctor checks two nodes; the site '{base.site.name}' runs its jobs "
                            f"on one ({base.site.scheduler})",
                            fix="name a Slurm site: hpctrain doctor JOB --site SITE")
    from .job.plan import make_plan
    plan = make_plan(base, "RUN_DIR")
    head = {"nodename": f'"{runner.first_node}"',
            "suffix": f'"{runner.first_node}"{shlex.quote(plan.head_suffix or "")}'}.get(plan.head_mode)
    py = shlex.join(plan.python)
    facts = '"$RUN_DIR/doctor/facts.jsonl"'
    resolve = f"--resolve {head} " if head else ""
    assets = f" --assets {shlex.quote(base.spec.isaaclab_assets)}" if base.spec.isaaclab_assets else ""
    line = ('mkdir -p "$RUN_DIR/doctor" && '
            + runner.every_node(f'{py} "$RUN_DIR/rank" probe facts {resolve}'
                                f'--writable "$RUN_DIR/checkpoints"{assets}') + f" >{facts}"
            + f' && {py} "$RUN_DIR/rank" probe gate {head or "-"} {facts} {NODES}')
    # A check, not a training run: it must end with its verdict, never be requeued (a requeue
    # that leaves out the node it blames could never start on the two nodes it names).
    preemption = dict(msgspec.to_builtins(base.spec.preemption), enabled=False, requeue=False)
    # The network floor's own measurement, against the job's floor (0 without one: shown only).
    health = dict(msgspec.to_builtins(base.spec.health),
                  allreduce_min_gbps=base.spec.health.allreduce_min_gbps or 0)
    return load_job(
        base, script=str(CHECK_PROGRAM), args=[], name=f"doctor-{base.spec.name}"[:60],
        sweep=None, after=[], setup=list(base.spec.setup) + [line], preemption=preemption,
        health=health,
        resources=msgspec.to_builtins(msgspec.structs.replace(
            base.spec.resources, nodes=NODES, time="00:10:00")))


def run(job: str | None, site: str | None, overrides=(), timeout: float = 900,
        say=lambda text: None) -> Report:
    from .follow.status import wait
    from .submission import prepare, submit_prepared
    checked = check_job(job, site, overrides)
    submitted = submit_prepared(prepare(checked))
    say(f"doctor: run {submitted.id}, job {submitted.record.job_id}: the job's settings on "
        f"{NODES} nodes, rank/before/check.py as its program ...")
    st = wait(submitted, timeout=timeout)
    report = judge(submitted, st.state.state.value, checked)
    report.scheduler = scheduler_line(backend(checked.site.scheduler).scheduler_version(),
                                      checked.site.slurm_version)
    return report


def scheduler_line(now: str | None, profile: str | None) -> str:
    """What doctor says of the cluster's Slurm release: the one it runs now, and the one the
    site profile was detected on where they differ (a release upgrade changes what its tools
    print; docs/slurm-releases.md)."""
    if not now:
        return ""
    if profile and profile != now:
        return (f"Slurm {now} (the site profile says {profile}: run `hpctrain site detect` "
                "again to record the release it runs now)")
    return f"Slurm {now}"


def _read_jsonl(path: Path) -> list[dict]:
    try:
        return probe.read_records(path.read_text())
    except OSError:
        return []


def judge(run: Run, state: str, job: Job) -> Report:
    from .job.plan import make_plan
    from .rank.records import read_job_failure
    plan = make_plan(job, str(run.path))
    d = Path(run.path)
    facts = _read_jsonl(d / "doctor" / "facts.jsonl")
    ranks = sorted((json.loads(p.read_text()) for p in (d / "doctor").glob("rank-*.json")),
                   key=lambda r: r["rank"])
    failure = read_job_failure(str(d))
    world = plan.nnodes * plan.nproc_per_node
    from .rank.before.netfloor import read
    floor = read(str(d))  # the launch's own network floor measurement (rank/before/netfloor.py)
    checks = [_names(facts, plan), _writable(facts, ranks, d)]
    checks.append(_rendezvous(ranks, world, failure, checks, plan, floor))
    checks.append(_network(floor, failure))
    checks.append(_allreduce(ranks))
    checks.append(_pinning(ranks))
    if job.spec.isaaclab_assets:
        checks.append(_assets(facts, job.spec.isaaclab_assets))
    return Report(run_id=run.id, run_dir=str(d), state=state, checks=checks)


def _head_name(facts: list[dict], plan) -> str | None:
    if plan.head_mode == "interface":
        return None
    # Each node resolved the head's name (--resolve) first, then its own.
    names = [f["resolve"][0]["name"] for f in facts if f.get("resolve")]
    return names[0] if names else None


def _names(facts: list[dict], plan) -> Check:
    name = "head name"
    if not facts:
        return Check(name=name, verdict=FAIL, detail="no node reported its facts (the probe step "
                     "did not run: see the job's log)", fix="hpctrain logs RUN")
    if plan.head_mode == "interface":
        return Check(name=name, verdict=PASS, detail=f"head.mode interface ({plan.head_interface}): "
                     "the head is its address, no name to resolve")
    head = _head_name(facts, plan)
    problems = [p for p in probe.problems(head, facts, NODES) if "resolve" in p]
    if problems:
        ifaces = sorted({i["name"] for f in facts for i in f.get("interfaces", [])
                         if i.get("up") and not i.get("loopback") and i.get("ipv4")})
        return Check(name=name, verdict=FAIL, detail="; ".join(problems),
                     fix="make the node's name resolve to its network address (not 127.x) in "
                     "/etc/hosts or DNS, or set the site's head.mode: interface with head.interface "
                     f"one of {', '.join(ifaces) or '?'} (or suffix with a name that resolves)")
    seen = ", ".join(f"{r['address']} on {f['node']}" for f in facts for r in f.get("resolve", [])
                     if r.get("name") == head)
    return Check(name=name, verdict=PASS, detail=f"'{head}' resolves to {seen}")


def _writable(facts: list[dict], ranks: list[dict], d: Path) -> Check:
    name = "run directory"
    bad = [f"{f['writable']['dir']} not writable from {f['node']}: {f['writable'].get('error')}"
           for f in facts if f.get("writable") and not f["writable"].get("ok")]
    bad += [f"rank {r['rank']} on {r['node']}: {r['checkpoint_dir'].get('error')}"
            for r in ranks if not r.get("checkpoint_dir", {}).get("ok", True)]
    if bad:
        return Check(name=name, verdict=FAIL, detail="; ".join(bad),
                     fix="put runs on a file system every node mounts read-write: set runs_dir in "
                     "the job or HPCTRAIN_RUNS_DIR (e.g. under $HOME or the project's scratch)")
    if not facts:
        return Check(name=name, verdict=NOT_RUN, detail="no node reported")
    nodes = ", ".join(f["node"] for f in facts)
    return Check(name=name, verdict=PASS, detail=f"{d / 'checkpoints'} writable from {nodes}")


def _assets(facts: list[dict], root: str) -> Check:
    name = "isaac assets"
    seen = [f for f in facts if f.get("assets")]
    if not seen:
        return Check(name=name, verdict=NOT_RUN, detail="no node reported")
    bad = [f"{f['node']}: {f['assets'].get('error')}" for f in seen if not f["assets"].get("ok")]
    if bad:
        return Check(name=name, verdict=FAIL, detail=f"{root} (isaaclab_assets): " + "; ".join(bad),
                     fix="mirror the Isaac asset root (its Isaac/IsaacLab/... files) on storage "
                     "every compute node mounts, and give that path as isaaclab_assets")
    nodes = ", ".join(f["node"] for f in seen)
    entries = seen[0]["assets"].get("entries")
    return Check(name=name, verdict=PASS,
                 detail=f"{root}/Isaac/IsaacLab readable from {nodes} ({entries} entries)")


def _rendezvous(ranks, world, failure, before: list[Check], plan, floor: dict | None) -> Check:
    name = "rendezvous"
    if len(ranks) == world:
        env = ranks[0]["env"]
        return Check(name=name, verdict=PASS,
                     detail=f"{world} ranks on {len({r['node'] for r in ranks})} nodes joined "
                     f"({ranks[0]['backend']}) through {env.get('MASTER_ADDR')}")
    reason = failure.reason if failure else None
    if reason == "setup" and any(c.verdict == FAIL for c in before):
        return Check(name=name, verdict=NOT_RUN, detail="the job stopped before it: see above")
    if reason == "preflight" and floor is not None and floor.get("passed") is False:
        return Check(name=name, verdict=NOT_RUN, detail="the nodes met; the network floor "
                     "stopped the job before the ranks started: see below")
    if reason == "preflight":
        ports = (str(plan.port_fixed) if plan.port_fixed else
                 f"{plan.port_base}-{plan.port_base + 2 * plan.port_slots - 1}")
        return Check(name=name, verdict=FAIL, detail=failure.message,
                     fix=f"the nodes must reach the head on the rendezvous port (here {ports}): ask "
                     "the admins which ports are open between compute nodes and set the site's "
                     "port.base/port.span (or port.fixed) inside that range")
    detail = (f"{len(ranks)} of {world} ranks reported"
              + (f"; the job ended: {failure.reason}: {failure.message}" if failure else ""))
    return Check(name=name, verdict=FAIL, detail=detail,
                 fix="hpctrain logs RUN shows each rank's output")


def _network(m: dict | None, failure) -> Check:
    """The network floor's measurement (status/netfloor.json), against the floor."""
    name = "network floor"
    if m is None or not isinstance(m.get("message"), str):
        detail = "the job stopped before it: see above" if failure else "no measurement"
        return Check(name=name, verdict=NOT_RUN, detail=detail)
    text = m["message"][:500]
    if m.get("passed") is True:
        floor = m.get("floor_gbps")
        if not floor:
            text += "; no floor set: health.allreduce_min_gbps in the site or job"
        return Check(name=name, verdict=PASS, detail=f"{m.get('backend', '?')}, {text}")
    return Check(name=name, verdict=FAIL, detail=text,
                 fix="the nodes' network carries less than the floor: check that NCCL uses the "
                 "fast fabric (NCCL_SOCKET_IFNAME, NCCL_IB_HCA in the site's env), or ask the "
                 "admins about the nodes named; the job leaves them out at its requeue")


def _allreduce(ranks: list[dict]) -> Check:
    name = "all-reduce"
    if not ranks or not ranks[0].get("allreduce"):
        return Check(name=name, verdict=NOT_RUN, detail="no rank got that far")
    rows = ranks[0]["allreduce"]
    sizes = ", ".join(f"{_size(r['bytes'])} {r['busbw_gbps']:.3g} GB/s" for r in rows)
    wrong = [_size(r["bytes"]) for r in ranks[0]["allreduce"] if not r["correct"]]
    if wrong:
        return Check(name=name, verdict=FAIL, detail=f"wrong sums at {', '.join(wrong)}",
                     fix="the collective library returns wrong results: report it to the admins")
    return Check(name=name, verdict=PASS,
                 detail=f"{ranks[0]['backend']}, bus bandwidth {sizes}")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n}{unit}"
        n //= 1024
    return f"{n}TiB"


def _pinning(ranks: list[dict]) -> Check:
    name = "devices and env"
    if not ranks:
        return Check(name=name, verdict=NOT_RUN, detail="no rank got that far")
    by_node: dict[str, list[dict]] = {}
    for r in ranks:
        by_node.setdefault(r["node"], []).append(r)
    shared = [f"{node}: ranks {', '.join(str(r['rank']) for r in rs)} share {dev}"
              for node, rs in by_node.items()
              for dev in {r["device"] for r in rs}
              if dev != "cpu" and sum(r["device"] == dev for r in rs) > 1]
    env = ranks[0]["env"]
    seen = (f"{len(ranks)} ranks, device {', '.join(sorted({r['device'] for r in ranks}))}, "
            f"OMP_NUM_THREADS={env.get('OMP_NUM_THREADS')}, "
            f"CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')}")
    if shared:
        return Check(name=name, verdict=FAIL, detail="; ".join(shared),
                     fix="each rank needs its own GPU: request gpus_per_node equal to the ranks "
                     "per node, and leave CUDA_VISIBLE_DEVICES to the scheduler")
    return Check(name=name, verdict=PASS, detail=seen)

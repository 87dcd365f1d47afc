"""Surviving the cluster: preemption and time limits, requeue, resume, preflight, timeouts.

Decisions only (plain values for the plan); the shell side is templates/parts/preemption.sh.j2
and preflight.sh.j2, the rank side is rank/bootstrap.py (resume, collective timeout) and rank/preflight.py.

The path of a preemption or an approaching time limit, end to end:

1. `#SBATCH --signal=B:SIG@LEAD` asks Slurm to send SIG (default USR2) to the batch shell only,
   LEAD seconds before the limit (Slurm may send it up to 60 s earlier). `--requeue` makes the
   job requeueable. The same path runs on `scancel --signal=SIG --batch JOBID` (preemption by
   hand, or by a site's preemption tooling).
2. The batch shell traps SIG and forwards it to `srun`, which forwards it to every task of the
   step; Slurm delivers it to every process of the step: torchrun's agents and the ranks.
   torchrun's agent handles TERM/INT/HUP/QUIT (it stops its workers) but not USR1/USR2, whose
   default action would kill the agent and the ranks unsaved: so the agent is started with
   USR1/USR2 ignored. The ranks inherit "ignored" and the training program installs its own
   handler (a program that does not is not killed; it is requeued from its last periodic
   checkpoint). The ranks learn the signal's name from HPCTRAIN_PREEMPT_SIGNAL.
3. The shell waits up to `grace` seconds for the ranks to save and exit, then requeues the job
   itself with `scontrol requeue` (JOBID, or ARRAYJOBID_TASKID for an array task) — from the
   batch shell on the host, never from the training process (a container has no scontrol) —
   unless SLURM_RESTART_COUNT (unset on the first run) has reached `max_requeues`: then the job
   ends with exit status 75 and status/failure.json says why.
4. The next run starts the ranks again; each rank's bootstrap finds the newest checkpoint in the
   run directory (where the library adapter says its library writes them) and hands it to the
   library's own resume option (HPCTRAIN_RESUME_FROM for a plain command). The same lookup makes
   torchrun's in-allocation restarts (launcher.max_restarts) resume.

torchrun's restarts (launcher.max_restarts > 0) need one more thing: a store that is new for
every attempt. By default (torch >= 2.4) the rank-0 agent hosts ONE TCPStore for the whole life
of the job and every attempt's ranks bootstrap their process group in it under the same keys
(default_pg/0/...): torch once prefixed them with TORCHELASTIC_RESTART_COUNT, but that count is
per agent (the node whose rank died says 1, the node restarted because the other one left says
0: pytorch#135712), and torch 2.13 neither prefixes the keys nor makes a new server per attempt.
The restarted ranks then read the dead attempt's addresses: gloo's connectFullMesh fails with
"Connection refused", or the mesh mixes attempts and the first collective hangs (both seen on 2
nodes here). TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 makes every rendezvous round publish a fresh
MASTER_PORT on which that attempt's rank 0 hosts the store: nothing from the last attempt is left.

Timeouts (seconds; every one can be set in the job file or in a site's `defaults:`):

- launcher.join_timeout: all nodes must join torchrun's c10d rendezvous within this. Default
  600, 1200 above 64 nodes (cold container pulls and slow file systems delay node starts).
- launcher.last_call_timeout: once the minimum number of nodes joined, how long the rendezvous
  waits for more. Default 30, 120 above 64 nodes.
- launcher.close_timeout: how long a closed rendezvous is kept. Default 60.
  (The three go into ONE --rdzv-conf value: torchrun does not append repeated ones.)
- launcher.collective_timeout: the process group's timeout for collectives (NCCL, gloo); the
  bootstrap makes it torch.distributed's default, so every init_process_group/new_group that does
  not pass its own timeout uses it. Default: torch's (10 min NCCL, 30 min gloo).
- launcher.preflight_timeout: every node must reach the head on the rendezvous port within this,
  before torchrun starts; then every rank must meet all the others (rank/preflight.rank_check, a
  counter in a TCPStore rank 0 hosts on HPCTRAIN_SPARE_PORT; no process group) within it too,
  before the program starts. Default 60, 180 above 64 nodes.
- preemption.lead_time: Slurm's signal comes this long before the time limit. Default 120.
- preemption.grace: how long the ranks get to save after the signal, before the requeue.
  Default 90; must leave room inside lead_time.
"""
from __future__ import annotations

from .loading import Job

# Signals whose default action kills torchrun's agent, which does not handle them: the agent is
# started with them ignored (see 2. above). TERM/INT/HUP the agent handles itself; URG is
# ignored by default.
IGNORED_BY_AGENT = ("USR1", "USR2")


def preemption(job: Job) -> dict | None:
    """The preemption settings for the script, or None where the job has none (preemption off,
    or a scheduler that neither signals ahead of the limit nor requeues). checks.py made sure
    the timing fits."""
    from .backends import backend_class
    p = job.spec.preemption
    if not p.enabled or not backend_class(job.site.scheduler).preemption:
        return None
    return {
        "signal": p.signal,
        "lead_time": p.lead_time,
        "grace": p.grace,
        "requeue": p.requeue,
        "max_requeues": p.max_requeues,
        "ignore_in_agent": p.signal in IGNORED_BY_AGENT,
    }


def directives(pre: dict | None) -> list[tuple[str, str | None]]:
    """The directive-table entries that ask for the signal and make the job requeueable."""
    if pre is None:
        return []
    out: list[tuple[str, str | None]] = [("signal", f"B:{pre['signal']}@{pre['lead_time']}")]
    if pre["requeue"]:
        out.append(("requeue", None))
    return out


def restart_env(job: Job) -> dict[str, str]:
    """Environment for torchrun when it may restart the ranks (see "torchrun's restarts" above)."""
    if job.spec.launcher.max_restarts <= 0 or "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" in job.spec.env:
        return {}
    return {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def preflight_timeout(job: Job) -> int:
    la, nodes = job.spec.launcher, job.spec.resources.nodes
    return la.preflight_timeout or (60 if nodes <= 64 else 180)

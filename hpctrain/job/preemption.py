"""Surviving the cluster: preemption, cancel and time limits, requeue, resume, hangs, bad nodes.

Decisions only (plain values for the plan); the shell side is templates/parts/preemption.sh.j2,
watch.sh.j2, preflight.sh.j2 and templates/slurm/requeue.sh.j2; the rank side is
rank/before/bootstrap.py (resume, collective timeout), rank/end/stop.py (signals), rank/during/train_hooks.py
(the libraries' iteration boundaries), rank/during/watch.py (hangs), rank/end/recovery.py (bad nodes) and
rank/before/preflight.py. The code a job runs is a snapshot (runs/snapshot.py).

The path of a preemption, an approaching time limit or a cancel, end to end:

1. `#SBATCH --signal=B:SIG@LEAD` asks Slurm to send SIG (default USR2) to the batch shell only,
   LEAD seconds before the limit (Slurm may send it up to 60 s earlier). `--requeue` makes the
   job requeueable. `scancel --signal=SIG --batch JOBID` takes the same path.
   A preemption is different (Slurm's PreemptMode=REQUEUE, no preempt_send_user_signal):
   SIGTERM goes to every task of the job's steps — the ranks and torchrun's agents, not the
   batch shell — then, GraceTime later, SIGTERM to everything and SIGKILL KillWait after that;
   a job whose batch script ends by itself inside the grace time is NOT requeued by Slurm 22.05;
   24.05+ requeues it, and requeues a job that `scontrol requeue` requeued there once more after
   its next run, so there the script ends and lets Slurm requeue (docs/slurm-releases.md).
   A user's `scancel` sends SIGTERM to everything at once and marks the job cancelled.
2. Every rank takes SIGTERM and SIG alike as "save now" (rank/end/stop.py): it writes
   status/stop-R.json and sets a flag. With the library's train hooks (rl_games, rsl_rl, skrl,
   skrl_jax, di_engine: unmodified train scripts) the ranks agree at the next iteration
   boundary, the rank that saves normally saves with the library's own save, and the library's
   training call returns as at its end: the program exits 0. A plain program keeps its own
   handler for SIG (SIGTERM is handed to it too), or ends on SIGTERM as it always did.
   torchrun's agent: SIG (USR1/USR2) would kill it, so it starts with SIG ignored (the ranks'
   bootstrap installs its handler anyway); SIGTERM it handles itself — it passes SIGTERM to its
   ranks and waits TORCH_ELASTIC_SHUTDOWN_TIMEOUT before SIGKILL, which the plan sets to
   `grace`, so that a saving rank is not killed at torch's 30 s.
3. The batch shell traps SIG and SIGTERM and forwards them to the step (srun passes them to
   every task); it waits up to `grace` seconds for the ranks. Then — also when it was not
   signalled itself but the ranks were (stop-R.json) or failed — it asks Slurm's view of the
   job (job_view: `scontrol show job`): being cancelled or timed out -> the job ends, not
   requeued (status/failure.json: cancelled); preempted (PreemptTime set) or still running
   (the time-limit warning, a signal sent by hand) -> it requeues itself with `scontrol
   requeue` (JOBID, or ARRAYJOBID_TASKID), from the batch shell on the host, never from the
   training process (a container has no scontrol) — unless SLURM_RESTART_COUNT (unset on the
   first run) has reached `max_requeues`: then the job ends with exit status 75.
   A cancel also fails whatever step runs at that moment (the preflight, the ranks), and a signal
   can arrive during the job's setup lines: the same view decides before any failure is taken
   for a node's fault, so a cancelled job is never requeued, and a signalled one never starts
   its preflight.
4. The next run starts the ranks again; each rank's bootstrap finds the newest checkpoint in the
   run directory (where the library adapter says its library writes them) and hands it to the
   library's own resume option (HPCTRAIN_RESUME_FROM for a plain command; DI-engine's through
   its config, by the train hook). A resumed skrl or rsl-rl run continues to the total the job
   asked for (train_hooks.py). The same lookup makes torchrun's in-allocation restarts
   (launcher.max_restarts) and `hpctrain submit --resume RUN` (a new allocation for a run that
   ended: time limit, requeue cap, failure) resume.
5. W&B and TensorBoard follow the run across requeues: WANDB_RUN_ID is derived from the run id,
   WANDB_RESUME=allow, WANDB_DIR is the run directory and HPCTRAIN_TENSORBOARD_DIR a directory
   in it (tracking_env; the job's own env wins).

Hangs (launcher.hang_timeout): every rank reports progress (the train hooks at each iteration,
a plain program through hpctrain_progress.report, or at least its output). A watcher beside the
launch (rank/during/watch.py) notices when no rank has progressed for the timeout, names the stuck
ranks and their nodes in status/failure.json and the batch shell ends the ranks on every node
(SIGQUIT: a stack dump into each rank's log; then SIGKILL). torchrun restarts them from the
newest checkpoint while launcher.max_restarts allows; after that the job fails and is requeued
as below.

Bad nodes: a failure that names a node — the preflight could not reach the head from it, a
hang's stuck ranks are there (and not on every node), a rank died of a hardware error — is
requeued (while max_requeues allows) without that node: `scontrol requeuehold`, ExcNodeList,
`scontrol release` (ExcNodeList changes only while a job is pending). No run leaves out more
than `preemption.max_excluded_nodes` nodes; status/excluded.json says which and why, and
`hpctrain submit --resume` leaves them out too. A program's own error is not requeued.

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
  before torchrun starts (inside the launch step, while each node imports torch: rank/preflight
  .launch; the tasks launcher runs it as a step of its own); then every rank must meet all the
  others (rank/preflight.rank_check, a counter in torchrun's own store, or in a TCPStore rank 0
  hosts on HPCTRAIN_SPARE_PORT where there is none; no process group) within it too, before the
  program starts. Default 60, 180 above 64 nodes.
- launcher.hang_timeout: no rank has progressed for this long -> a hang (above). Default: off.
- preemption.lead_time: Slurm's signal comes this long before the time limit. Default 120.
- preemption.grace: how long the ranks get to save after the signal, before the requeue (and
  how long torchrun's agent waits for them). Default 90; must leave room inside lead_time.
"""
from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .load import Job

# Signals whose default action kills torchrun's agent, which does not handle them: the agent is
# started with them ignored (see 2. above). TERM/INT/HUP the agent handles itself; URG is
# ignored by default.
IGNORED_BY_AGENT = ("USR1", "USR2")


def settings(job: Job, supported: bool) -> dict | None:
    """The preemption settings for the script, or None where the job has none (preemption off,
    or `supported` false: the site's backend neither signals ahead of the limit nor requeues,
    which the caller asks the backend). job/checks.py made sure the timing fits."""
    p = job.spec.preemption
    if not p.enabled or not supported:
        return None
    return {
        "signal": p.signal,
        "lead_time": p.lead_time,
        "grace": p.grace,
        "requeue": p.requeue,
        "max_requeues": p.max_requeues,
        "max_excluded_nodes": p.max_excluded_nodes,
        "ignore_in_agent": p.signal in IGNORED_BY_AGENT,
        # SIGTERM is "save now" too (4. above); trapped apart when it is not the signal itself.
        "trap_term": p.signal != "TERM",
    }


def launcher_env(job: Job, pre: dict | None, torchrun: bool) -> dict[str, str]:
    """Environment for torchrun: a fresh store per restart (see "torchrun's restarts" above),
    and a shutdown that waits as long as the ranks may take to save (2. above)."""
    env = {}
    if job.spec.launcher.max_restarts > 0:
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    if pre is not None and torchrun:
        env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = str(pre["grace"])
    return {k: v for k, v in env.items() if k not in job.spec.env}


def tracking_env(run_dir: str) -> dict[str, str]:
    """A tracking id that survives requeues and resubmits (6. above): W&B's run id from the run
    id (a sweep task's from the run id and its index), resume allowed, W&B's files and a
    TensorBoard directory in the run directory. The job's own env (or the site's) wins."""
    path = run_dir.rstrip("/")
    parent, name = os.path.split(path)
    run_id = name
    if os.path.basename(parent) == "tasks":  # RUN_DIR/tasks/<i>
        run_id = f"{os.path.basename(os.path.dirname(parent))}-{name}"
    return {
        "WANDB_RUN_ID": re.sub(r"[^a-z0-9_-]", "-", run_id.lower())[:64],
        "WANDB_RESUME": "allow",
        "WANDB_DIR": run_dir,
        "HPCTRAIN_TENSORBOARD_DIR": os.path.join(run_dir, "tensorboard"),
    }


def preflight_timeout(job: Job) -> int:
    la, nodes = job.spec.launcher, job.spec.resources.nodes
    return la.preflight_timeout or (60 if nodes <= 64 else 180)

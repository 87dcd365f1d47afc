#!/bin/bash
#SBATCH --job-name=ddp-check
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --time=01:00:00
#SBATCH --output=/runs/ddp-check/RUN_ID/logs/slurm-%j.out
#SBATCH --open-mode=append
#SBATCH --signal=B:USR2@120
#SBATCH --requeue
#
# ddp-check on site 'containers': 1 node(s) x 2 rank(s), rendered by hpctrain 0.1.0.
# Each rank runs: train.py --steps 10
# This file is the whole job: resubmit it by hand with  sbatch /runs/ddp-check/RUN_ID/job.sbatch
set -euo pipefail

RUN_DIR=/runs/ddp-check/RUN_ID
log() { printf '[%s] hpctrain: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
mkdir -p "$RUN_DIR/logs" "$RUN_DIR/status"
# status/failure.json: why the job ended without success, for `hpctrain status` (and you).
record_failure() {  # REASON STATUS [MESSAGE]
  local out line
  out=$(python3 "$RUN_DIR/rank" summarize "$RUN_DIR" "$@" 2>&1) || out="could not write status/failure.json: $out"
  while IFS= read -r line; do log "failure: $line"; done <<<"$out"
}

# --- requeue (Slurm) --------------------------------------------------------------------------
# After a preemption: requeue from this shell, on the host (the training process may run in a
# container without scontrol). Capped by SLURM_RESTART_COUNT, which Slurm leaves unset on the
# first run.
requeue_or_end() {
  local count=${SLURM_RESTART_COUNT:-0} ref=$SLURM_JOB_ID
  if [[ -n "${SLURM_ARRAY_JOB_ID:-}" && -n "${SLURM_ARRAY_TASK_ID:-}" ]]; then
    ref="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"  # this task, not the whole array
  fi
  if (( count >= 3 )); then
    record_failure preempted 75 "preempted and not requeued: job $ref has been requeued $count time(s), the limit is preemption.max_requeues=3; resubmit the run to resume"
    log "preemption: not requeueing: job $ref has been requeued $count time(s), the limit is preemption.max_requeues=3"
    exit 75
  fi
  log "preemption: requeueing job $ref (requeue $(( count + 1 )) of at most 3); the next run resumes from the newest checkpoint"
  local out
  out=$(scontrol requeue "$ref" 2>&1) || { record_failure preempted 75 "scontrol requeue $ref failed: $out"; die "preemption: scontrol requeue $ref failed: $out"; }
  # Slurm now ends this run (SIGTERM, then SIGKILL) and queues the job again.
  sleep 300 &
  wait $! || true
  exit 0
}

# --- preemption (hpctrain/survive.py) ---------------------------------------------------------
# The scheduler sends SIGUSR2 to this shell 120 s (up to 60 s more) before the time limit,
# or when the job is preempted. It is forwarded to the ranks; they get 90 s to save, then
# requeue_or_end (above) decides.
PREEMPTED=0
PREEMPTED_AT=0
on_preempt() {
  if (( PREEMPTED )); then
    log "preemption: SIGUSR2 again; already handling it"
    return
  fi
  PREEMPTED=1
  PREEMPTED_AT=$SECONDS
  if [[ -n "${CHILD:-}" ]] && kill -0 "$CHILD" 2>/dev/null; then
    log "preemption: SIGUSR2 received; forwarded to the ranks, they have 90 s to save"
    kill -s USR2 "$CHILD" 2>/dev/null || log "preemption: could not forward SIGUSR2 (the launch just ended?)"
  else
    log "preemption: SIGUSR2 received before the ranks started"
  fi
}
trap on_preempt USR2

# After the forwarded signal: give the ranks the grace period to save and exit.
wait_for_grace() {
  local deadline=$(( PREEMPTED_AT + 90 ))
  while kill -0 "$CHILD" 2>/dev/null && (( SECONDS < deadline )); do
    sleep 1
  done
  if kill -0 "$CHILD" 2>/dev/null; then
    log "preemption: the ranks still run after the grace period (90 s, preemption.grace)"
    return 1
  fi
  STATUS=0
  wait "$CHILD" || STATUS=$?
  log "preemption: the ranks exited (status $STATUS) $(( SECONDS - PREEMPTED_AT )) s after the signal"
}

# --- environment ----------------------------------------------------------------------------
# The scheduler hands the submitting shell's environment to the job: a shell that ran torchrun,
# a JAX job or an earlier hpctrain rank would give every rank here a stale identity. Start clean.
unset RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK ROLE_RANK MASTER_ADDR MASTER_PORT \
  TORCHELASTIC_RUN_ID TORCHELASTIC_RESTART_COUNT JAX_RANK JAX_LOCAL_RANK JAX_WORLD_SIZE \
  JAX_COORDINATOR_ADDR JAX_COORDINATOR_PORT HPCTRAIN_RANK HPCTRAIN_IS_MAIN HPCTRAIN_SEED \
  HPCTRAIN_BASE_SEED HPCTRAIN_RESUME_FROM HPCTRAIN_JOB_ID
cd /work/job
export NCCL_SOCKET_IFNAME=ib
export HPCTRAIN_RUN_DIR=/runs/ddp-check/RUN_ID
export HPCTRAIN_JOB_NAME=ddp-check
export HPCTRAIN_SITE=containers
export HPCTRAIN_LIBRARY=command

# --- nodes (Slurm) --------------------------------------------------------------------------
NNODES=1
export HPCTRAIN_JOB_ID=$SLURM_JOB_ID
[[ "${SLURM_JOB_NUM_NODES:-}" == "$NNODES" ]] || die "the allocation has ${SLURM_JOB_NUM_NODES:-?} node(s), the job was planned for $NNODES: render it again with --set resources.nodes=N instead of overriding -N"

# --- rendezvous -----------------------------------------------------------------------------
# Derived from the job's id, the same on every node, above the kernel's ephemeral port range.
PORT=$(( 61000 + 2 * (HPCTRAIN_JOB_ID % 2268) ))
export HPCTRAIN_PORT=$PORT HPCTRAIN_SPARE_PORT=$(( PORT + 1 ))
export HPCTRAIN_HEAD=localhost


# --- container: singularity (hpctrain/containers.py) ------------------------------------
# This shell stays on the host; on every node the launch runs in docker://python:3.11:
# the run and working directories are bound at the same paths.
# --cleanenv: the ranks get only the variables named here, each exported per task from the
# task's own environment as SINGULARITYENV_NAME (a secret's value never appears in this
# file nor in an argument list that other users of the node could read).
# shellcheck disable=SC2016,SC2154
CONTAINER=(bash -c 'for v in NCCL_SOCKET_IFNAME HPCTRAIN_RUN_DIR HPCTRAIN_JOB_NAME HPCTRAIN_SITE HPCTRAIN_LIBRARY HPCTRAIN_JOB_ID HPCTRAIN_PORT HPCTRAIN_SPARE_PORT HPCTRAIN_HEAD HPCTRAIN_NODES SLURM_JOB_ID SLURM_STEP_ID SLURM_PROCID SLURM_LOCALID SLURM_NODEID SLURM_NTASKS SLURM_NTASKS_PER_NODE SLURM_CPUS_PER_TASK SLURMD_NODENAME SLURM_JOB_NODELIST SLURM_RESTART_COUNT SLURM_ARRAY_JOB_ID SLURM_ARRAY_TASK_ID CUDA_VISIBLE_DEVICES NVIDIA_VISIBLE_DEVICES; do [[ -z "${!v+x}" ]] || export "SINGULARITYENV_$v=${!v}"; done; exec "$@"' hpctrain-container
  singularity exec --cleanenv --bind /runs/ddp-check/RUN_ID:/runs/ddp-check/RUN_ID --bind /work/job:/work/job --pwd /opt/work docker://python:3.11)

# --- launch ---------------------------------------------------------------------------------
# torchrun's agent does not handle SIGUSR2, whose default action would kill it and its ranks
# unsaved: start it with the signal ignored. The ranks inherit that; the program installs its own handler.
# shellcheck disable=SC2016
AGENT=(bash -c 'trap "" USR2; exec "$@"' hpctrain-agent)
LAUNCH=(srun --nodes="$NNODES" --ntasks="$NNODES" --ntasks-per-node=1 --cpus-per-task=2 --kill-on-bad-exit=1
  "${CONTAINER[@]}" "${AGENT[@]}" python -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node=2 --max-restarts=0
  "$RUN_DIR/rank" run "$RUN_DIR/bootstrap.json")
(( ! PREEMPTED )) || requeue_or_end
log "launch: ${LAUNCH[*]}"
# In the background, so that signals reach this shell's traps while the ranks run.
"${LAUNCH[@]}" &
CHILD=$!
STATUS=0
wait "$CHILD" || STATUS=$?
# A trapped signal interrupts `wait` while the launch still runs.
while kill -0 "$CHILD" 2>/dev/null; do
  if (( PREEMPTED )); then
    wait_for_grace || true
    break
  fi
  STATUS=0
  wait "$CHILD" || STATUS=$?
done
(( ! PREEMPTED )) || requeue_or_end
if (( STATUS != 0 )); then
  record_failure ranks "$STATUS"
  die "the ranks exited with status $STATUS; per-rank logs: $RUN_DIR/logs/rank-*.log"
fi
log "done: all ranks exited 0"

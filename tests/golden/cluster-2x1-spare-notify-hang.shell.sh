#!/bin/bash
#
# ddp-check on site 'localcluster': 2 node(s) x 1 rank(s), rendered by hpctrain 0.1.0.
# Each rank runs: train.py --steps 10
# This file is the whole job: hpctrain shell gives this shell; hpctrain launch runs the job in it
set -euo pipefail

RUN_DIR=/runs/ddp-check/RUN_ID
log() { printf '[%s] hpctrain: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
mkdir -p "$RUN_DIR/logs" "$RUN_DIR/status"
# status/failure.json: why the job ended without success, for `hpctrain status` (and you).
record_failure() {  # REASON STATUS [MESSAGE]
  local out line
  out=$(python "$RUN_DIR/rank" summarize "$RUN_DIR" "$@" 2>&1) || out="could not write status/failure.json: $out"
  while IFS= read -r line; do log "failure: $line"; done <<<"$out"
}
# An earlier attempt's failure (the one that requeued this job, a hang a restart got past) goes
# to status/failures.jsonl: failure.json speaks of this attempt only.
archive_failure() {
  [[ ! -e "$RUN_DIR/status/failure.json" ]] || python "$RUN_DIR/rank" archive "$RUN_DIR" || true
}

# --- environment ----------------------------------------------------------------------------
export HPCTRAIN_STARTED=${EPOCHREALTIME:-$(date +%s.%N)}  # this attempt's start (rank/phases.py)
archive_failure
# The scheduler hands the submitting shell's environment to the job: a shell that ran torchrun,
# a JAX job or an earlier hpctrain rank would give every rank here a stale identity. Start clean.
unset RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK ROLE_RANK MASTER_ADDR MASTER_PORT \
  TORCHELASTIC_RUN_ID TORCHELASTIC_RESTART_COUNT JAX_RANK JAX_LOCAL_RANK JAX_WORLD_SIZE \
  JAX_COORDINATOR_ADDR JAX_COORDINATOR_PORT HPCTRAIN_RANK HPCTRAIN_IS_MAIN HPCTRAIN_SEED \
  HPCTRAIN_BASE_SEED HPCTRAIN_RESUME_FROM HPCTRAIN_JOB_ID
cd /work/job
# The program runs from the copy of the code taken at submit (hpctrain/runs/snapshot.py), so that
# edits made since — before a requeue, say — do not change what this run trains.
cd /runs/ddp-check/RUN_ID/code
export OMP_NUM_THREADS=1
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=90
export WANDB_RUN_ID=run_id
export WANDB_RESUME=allow
export WANDB_DIR=/runs/ddp-check/RUN_ID
export HPCTRAIN_TENSORBOARD_DIR=/runs/ddp-check/RUN_ID/tensorboard
export HPCTRAIN_RUN_DIR=/runs/ddp-check/RUN_ID
export HPCTRAIN_JOB_NAME=ddp-check
export HPCTRAIN_SITE=localcluster
export HPCTRAIN_LIBRARY=command
# The interactive step's own task variables would shape the launch's steps (srun reads them):
# the shell sees the job's, as the batch shell does.
unset SLURM_DISTRIBUTION SLURM_NNODES SLURM_NTASKS SLURM_NPROCS SLURM_CPUS_PER_TASK SLURM_TASKS_PER_NODE
export SLURM_NNODES=$SLURM_JOB_NUM_NODES

# --- nodes (Slurm) --------------------------------------------------------------------------
NNODES=2
export HPCTRAIN_JOB_ID=$SLURM_JOB_ID
# resources.spare_nodes: the allocation holds 2 + 1 nodes; each attempt runs on 2 of them,
# named (CHOSEN, rank/before/spares.py: never one a failure blamed), the others stay idle. A spare takes
# a blamed node's place in a new attempt of this same allocation (requeue.sh.j2: replace_node).
SPARE_ROUND=${HPCTRAIN_SPARE_ROUND:-0}
rm -f "$RUN_DIR/status/nodes-down.txt"  # an earlier attempt's (requeue.sh.j2: nodes_down)
export HPCTRAIN_ATTEMPT=$(( ${SLURM_RESTART_COUNT:-0} * 100 + SPARE_ROUND ))  # 100 per requeue, 1 per replacement
# (Fewer spares than planned is no error: a requeue may hold what is left of them.)
if ! [[ "${SLURM_JOB_NUM_NODES:-}" =~ ^[0-9]+$ ]] || (( SLURM_JOB_NUM_NODES < NNODES || SLURM_JOB_NUM_NODES > NNODES + 1 )); then
  die "the allocation has ${SLURM_JOB_NUM_NODES:-?} node(s), the job was planned for $NNODES + 1 spare(s): render it again with --set resources.nodes=N instead of overriding -N"
fi
# The allocation's nodes that can still run an attempt, in the allocation's order: the job's node
# list now (--no-kill drops a failed node from the job; SLURM_JOB_NODELIST is the list at its
# start), less the nodes Slurm reports down, drained or not responding.
allocation_now() {
  local now gone
  now=$(scontrol -o show job "$SLURM_JOB_ID" 2>/dev/null | grep -o ' NodeList=[^ ]*' | cut -d= -f2) || now=
  [[ -n "$now" && "$now" != "(null)" ]] || now=${SLURM_JOB_NODELIST:-}
  gone=$(sinfo -h -N -n "$now" -o '%N %T' 2>/dev/null | awk '$2 ~ /[*]$/ || $2 ~ /^(down|drain|fail)/ {print $1}') || gone=
  scontrol show hostnames "$now" | grep -vxF -f <(printf '%s\n' "$gone") | paste -sd, -
}
ALLOCATION=$(allocation_now) && [[ -n "$ALLOCATION" ]] || die "cannot read the allocation's nodes (SLURM_JOB_NODELIST='${SLURM_JOB_NODELIST:-}')"
CHOSEN=$(python "$RUN_DIR/rank" spares pick "$RUN_DIR" "$NNODES" "$ALLOCATION" 2>&1) || die "no nodes for this attempt: $CHOSEN"
NODELIST=$(tr ',' '\n' <<<"$CHOSEN")
FIRST=${NODELIST%%$'\n'*}
log "nodes: $CHOSEN of the allocation $ALLOCATION (the head: $FIRST; the others are spares)"

# --- rendezvous -----------------------------------------------------------------------------
HEAD=$FIRST
HEAD_ADDR=$(getent ahostsv4 "$HEAD" | awk 'NR == 1 {print $1}') || true
[[ -n "$HEAD_ADDR" ]] || die "the head '$HEAD' does not resolve on $(hostname): check the site's head.mode"
case "$HEAD_ADDR" in
  127.*) die "the head '$HEAD' resolves to loopback ($HEAD_ADDR): other nodes could not reach it; set the site's head.mode to interface or suffix" ;;
esac
# Derived from the job's id, the same on every node, above the kernel's ephemeral port range.
PORT=$(( 61000 + 2 * (HPCTRAIN_JOB_ID % 2268) ))
export HPCTRAIN_PORT=$PORT HPCTRAIN_SPARE_PORT=$(( PORT + 1 ))
export HPCTRAIN_HEAD=$HEAD
log "rendezvous: $HEAD:$PORT ($HEAD_ADDR), $NNODES nodes: $(echo "$NODELIST" | paste -sd, -)"
export NNODES RUN_DIR
set +e +u +o pipefail  # an interactive shell: a failing command is not the end of it
if ! command -v hpctrain >/dev/null 2>&1; then
  hpctrain() {
    if [[ $# -eq 1 && $1 == launch ]]; then
      bash "$RUN_DIR/launch.sh"
    else
      echo "hpctrain: hpctrain is not installed on $(hostname): only 'hpctrain launch' works in this shell" >&2
      return 2
    fi
  }
fi
printf '%s\n' 'hpctrain shell: ddp-check'", allocation $SLURM_JOB_ID on $(scontrol show hostnames "$SLURM_JOB_NODELIST" | paste -sd, -)" \
  "  run directory  $RUN_DIR" \
  "  hpctrain launch   the job's launch on every node (each one an attempt in the run directory)" \
  "  exit              leave; the allocation is released"
PS1='[ddp-check] ''\h:\w\$ '

#!/bin/bash
#
# ddp-check on site 'locallab': 2 node(s) x 2 rank(s), rendered by hpctrain 0.1.0.
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
export WANDB_RUN_ID=run_id
export WANDB_RESUME=allow
export WANDB_DIR=/runs/ddp-check/RUN_ID
export HPCTRAIN_TENSORBOARD_DIR=/runs/ddp-check/RUN_ID/tensorboard
export HPCTRAIN_RUN_DIR=/runs/ddp-check/RUN_ID
export HPCTRAIN_JOB_NAME=ddp-check
export HPCTRAIN_SITE=locallab
export HPCTRAIN_LIBRARY=command
export HPCTRAIN_HEAD=node5 RUN_DIR
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
printf '%s\n' 'hpctrain shell: ddp-check on node5 (hosts: node5,node6)' \
  "  run directory  $RUN_DIR" \
  "  hpctrain launch   the job's launch on every host (each one an attempt in the run directory)" \
  "  exit              leave"
PS1='[ddp-check] ''\h:\w\$ '

#!/bin/bash
#
# ddp-check on site 'local': 1 node(s) x 2 rank(s), rendered by hpctrain 0.1.0.
# Each rank runs: train.py --steps 10
# This file is the whole job: rerun it by hand with  bash /runs/ddp-check/RUN_ID/job.sh
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
# An earlier attempt's failure (the one that requeued this job, a hang a restart got past) goes
# to status/failures.jsonl: failure.json speaks of this attempt only.
archive_failure() {
  [[ ! -e "$RUN_DIR/status/failure.json" ]] || python3 "$RUN_DIR/rank" archive "$RUN_DIR" || true
}
# The local backend learns which process the job is from status/pid (written first, so that a
# submit killed before it recorded the pid leaves a job it can still find), and how it ended
# from status/exit_code.
echo $$ >"$RUN_DIR/status/pid"
trap 'echo $? >"$RUN_DIR/status/exit_code"' EXIT
pass_stop() {  # SIG
  log "SIG$1: passed to torchrun as SIGTERM; the ranks save at the next iteration boundary"
  kill -TERM "$CHILD" 2>/dev/null || true
}
# The ranks a killed torchrun left (they lead sessions of their own): ended after a launch that
# was stopped or failed (one that exited 0 has waited for every rank).
end_ranks() {
  if [[ -n $STOP_SIGNAL ]] || (( STATUS != 0 )); then
    python3 "$RUN_DIR/rank" end-ranks "$RUN_DIR" || true
  fi
}

# --- signals (no scheduler: this shell answers for the job) -----------------------------------
# TERM, INT or HUP to this shell (a shutdown, a closed session, a `kill`, `hpctrain cancel`) is
# "save now", as a preemption is on a cluster: SIGTERM goes to torchrun (on every host), which
# passes it on to the ranks; they save at the next iteration boundary and end. The job then ends
# STOPPED, with where it stopped and what it saved (status/stopped.json); so does a signal sent
# to torchrun or to a rank itself. Ranks that outlive the launch (a killed torchrun's) are ended after it.
STOP_SIGNAL=""
STARTED=$(date +%s)
rm -f "$RUN_DIR"/status/stop-*.json "$RUN_DIR"/status/stopped-at-*.json "$RUN_DIR/status/stopped.json"
on_stop() {  # SIG
  if [[ -n $STOP_SIGNAL ]]; then
    log "SIG$1 (already stopping on SIG$STOP_SIGNAL): the ranks are saving"
    return
  fi
  STOP_SIGNAL=$1
  if [[ -n ${CHILD:-} ]] && kill -0 "$CHILD" 2>/dev/null; then
    pass_stop "$1"
  else
    log "SIG$1 before the ranks started"
    stopped_exit 0
  fi
}
trap 'on_stop TERM' TERM
trap 'on_stop INT' INT
trap 'on_stop HUP' HUP
# The launch ended after a signal (this shell's, or torchrun's or a rank's own): STOPPED, unless
# a rank failed with an error of its own (then the status below records a failure).
stopped_exit() {  # STATUS
  local sig=$STOP_SIGNAL said
  if [[ -z $sig ]]; then
    sig=$(sed -n 's/.*"signal": *"\([A-Z0-9]*\)".*/\1/p' "$RUN_DIR"/status/stop-*.json 2>/dev/null | head -n 1) || sig=
  fi
  sig=${sig:-TERM}
  said=$(python3 "$RUN_DIR/rank" stopped "$RUN_DIR" "$sig" "$1" "$STARTED" 2>&1) || return 0
  log "$said"
  exit $(( 128 + $(kill -l "$sig" 2>/dev/null || echo 15) ))
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
export WANDB_RUN_ID=run_id
export WANDB_RESUME=allow
export WANDB_DIR=/runs/ddp-check/RUN_ID
export HPCTRAIN_TENSORBOARD_DIR=/runs/ddp-check/RUN_ID/tensorboard
export HPCTRAIN_RUN_DIR=/runs/ddp-check/RUN_ID
export HPCTRAIN_JOB_NAME=ddp-check
export HPCTRAIN_SITE=local
export HPCTRAIN_LIBRARY=command

# --- node (this machine) --------------------------------------------------------------------
export HPCTRAIN_JOB_ID=$$

# --- rendezvous -----------------------------------------------------------------------------
# Derived from the job's id, the same on every node, above the kernel's ephemeral port range.
PORT=$(( 61000 + 2 * (HPCTRAIN_JOB_ID % 2268) ))
export HPCTRAIN_PORT=$PORT HPCTRAIN_SPARE_PORT=$(( PORT + 1 ))
export HPCTRAIN_HEAD=localhost

# --- container: podman (hpctrain/job/containers.py) --------------------------------
# This shell stays on the host; on every node the launch runs in localhost/hpctrain-test:latest:
# the run and working directories are bound at the same paths.
# Through hpctrain's supervisor (rank/container.py): it forwards the step's signals to every
# process of the container and leaves no container behind. Variables pass by name (--env NAME).
# shellcheck disable=SC2154
CONTAINER=(python3 /runs/ddp-check/RUN_ID/rank container podman -- --network=host --init --env WANDB_RUN_ID --env WANDB_RESUME --env WANDB_DIR --env HPCTRAIN_TENSORBOARD_DIR --env HPCTRAIN_RUN_DIR --env HPCTRAIN_JOB_NAME --env HPCTRAIN_SITE --env HPCTRAIN_LIBRARY --env HPCTRAIN_JOB_ID --env HPCTRAIN_PORT --env HPCTRAIN_SPARE_PORT --env HPCTRAIN_HEAD --env HPCTRAIN_NODES --env SLURM_JOB_ID --env SLURM_STEP_ID --env SLURM_PROCID --env SLURM_LOCALID --env SLURM_NODEID --env SLURM_NTASKS --env SLURM_NTASKS_PER_NODE --env SLURM_CPUS_PER_TASK --env SLURMD_NODENAME --env SLURM_JOB_NODELIST --env SLURM_RESTART_COUNT --env SLURM_ARRAY_JOB_ID --env SLURM_ARRAY_TASK_ID --env CUDA_VISIBLE_DEVICES --env NVIDIA_VISIBLE_DEVICES --env TORCH_FR_BUFFER_SIZE --env TORCH_NCCL_TRACE_BUFFER_SIZE -v /runs/ddp-check/RUN_ID:/runs/ddp-check/RUN_ID -v /work/job:/work/job --workdir /work/job localhost/hpctrain-test:latest)


# --- launch ---------------------------------------------------------------------------------
LAUNCH=("${CONTAINER[@]}" python "$RUN_DIR/rank" agent --standalone --nnodes=1 --nproc-per-node=2 --max-restarts=0
  "$RUN_DIR/rank" run "$RUN_DIR/bootstrap.json")
# This attempt's start and the end of its set-up, for where its minutes before the first step go
# (rank/phases.py; the nodes and rank 0 add theirs).
PHASES="$RUN_DIR/status/phases/${HPCTRAIN_JOB_ID:-0}-${HPCTRAIN_ATTEMPT:-0}"
if mkdir -p "$PHASES"; then
  printf '{"started": "%s", "setup": "%s"}\n' "$HPCTRAIN_STARTED" "${EPOCHREALTIME:-$(date +%s.%N)}" >"$PHASES/shell.json" || true
fi
log "launch: ${LAUNCH[*]}"
# In the background, so that signals reach this shell's traps while the ranks run.
"${LAUNCH[@]}" &
CHILD=$!
STATUS=0
# A trapped signal ends `wait` early (on_stop forwards it): wait again until the launch ends.
while :; do
  STATUS=0
  wait "$CHILD" || STATUS=$?
  if (( STATUS <= 128 )) || ! kill -0 "$CHILD" 2>/dev/null; then
    break
  fi
done
# Ranks whose rate stayed below 0.8x the median for 300 s are named (rank/slow.py, status/slow.json).
SLOW=$(python3 "$RUN_DIR/rank" slow "$RUN_DIR" 0 2>&1) || true
while IFS= read -r line; do [[ -z "$line" ]] || log "$line"; done <<<"$SLOW"
end_ranks
if [[ -n $STOP_SIGNAL ]] || compgen -G "$RUN_DIR/status/stop-*.json" >/dev/null; then
  stopped_exit "$STATUS"
fi
if (( STATUS != 0 )); then
  record_failure ranks "$STATUS"
  die "the ranks exited with status $STATUS; per-rank logs: $RUN_DIR/logs/rank-*.log"
fi
archive_failure
log "done: all ranks exited 0"

#!/bin/bash
#
# ddp-check on site 'localcluster': 2 node(s) x 2 rank(s), rendered by hpctrain 0.1.0.
# Each rank runs: train.py --steps 10
# This file is the whole job: run it again inside the allocation with  hpctrain launch  (or  bash /runs/ddp-check/RUN_ID/launch.sh)
set -euo pipefail

RUN_DIR=/runs/ddp-check/RUN_ID
[[ -n "${SLURM_JOB_ID:-}" ]] || { echo "hpctrain: error: run this inside its allocation: hpctrain shell JOB, then hpctrain launch" >&2; exit 2; }
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
# This launch's output, also in the run directory (hpctrain logs RUN shows it).
# (tee ignores Ctrl-C and TERM: it writes until this shell's last line, whatever stops the launch.)
exec > >(trap '' INT TERM HUP; exec tee -a "$RUN_DIR/logs/slurm-$SLURM_JOB_ID.out") 2>&1
LOG_TEE=${!:-}
# The launch returns once its log is whole (tee runs apart from this shell: the user's next
# command may read the log before tee wrote its last lines), waiting at most 5 s for it.
finish_log() {
  local i
  exec >&- 2>&-
  [[ -n $LOG_TEE ]] || return 0
  for (( i = 0; i < 50; i++ )); do
    kill -0 "$LOG_TEE" 2>/dev/null || break
    sleep 0.1
  done
}
trap finish_log EXIT
pass_stop() {  # SIG
  log "SIG$1: passed to the launch step as SIGTERM; the ranks save at the next iteration boundary"
  kill -TERM "$CHILD" 2>/dev/null || true
}
# The step's processes end with the step: Slurm's to end, not this shell's.
end_ranks() { :; }

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

# --- nodes (Slurm) --------------------------------------------------------------------------
NNODES=2
export HPCTRAIN_JOB_ID=$SLURM_JOB_ID
export HPCTRAIN_ATTEMPT=${SLURM_RESTART_COUNT:-0}  # each requeue starts a new attempt
[[ "${SLURM_JOB_NUM_NODES:-}" == "$NNODES" ]] || die "the allocation has ${SLURM_JOB_NUM_NODES:-?} node(s), the job was planned for $NNODES: render it again with --set resources.nodes=N instead of overriding -N"
# The head is the first host of the job's own node list (never the submit host, never a guess).
NODELIST=$(scontrol show hostnames "${SLURM_JOB_NODELIST:-}" 2>&1) || die "cannot expand SLURM_JOB_NODELIST='${SLURM_JOB_NODELIST:-}': $NODELIST"
FIRST=${NODELIST%%$'\n'*}
[[ -n "$FIRST" ]] || die "cannot determine the head node from SLURM_JOB_NODELIST='${SLURM_JOB_NODELIST:-}'"

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


# --- container: podman (hpctrain/job/containers.py) --------------------------------
# This shell stays on the host; on every node the launch runs in localhost/hpctrain-test:latest:
# the run and working directories are bound at the same paths.
# Through hpctrain's supervisor (rank/container.py): it forwards the step's signals to every
# process of the container and leaves no container behind. Variables pass by name (--env NAME).
# shellcheck disable=SC2154
CONTAINER=(python3 /runs/ddp-check/RUN_ID/rank container podman --runtime runc --cgroup-manager=cgroupfs -- --network=host --init --env OMP_NUM_THREADS --env TORCH_ELASTIC_SHUTDOWN_TIMEOUT --env WANDB_RUN_ID --env WANDB_RESUME --env WANDB_DIR --env HPCTRAIN_TENSORBOARD_DIR --env HPCTRAIN_RUN_DIR --env HPCTRAIN_JOB_NAME --env HPCTRAIN_SITE --env HPCTRAIN_LIBRARY --env HPCTRAIN_JOB_ID --env HPCTRAIN_PORT --env HPCTRAIN_SPARE_PORT --env HPCTRAIN_HEAD --env HPCTRAIN_NODES --env SLURM_JOB_ID --env SLURM_STEP_ID --env SLURM_PROCID --env SLURM_LOCALID --env SLURM_NODEID --env SLURM_NTASKS --env SLURM_NTASKS_PER_NODE --env SLURM_CPUS_PER_TASK --env SLURMD_NODENAME --env SLURM_JOB_NODELIST --env SLURM_RESTART_COUNT --env SLURM_ARRAY_JOB_ID --env SLURM_ARRAY_TASK_ID --env CUDA_VISIBLE_DEVICES --env NVIDIA_VISIBLE_DEVICES --env TORCH_FR_BUFFER_SIZE --env TORCH_NCCL_TRACE_BUFFER_SIZE -v /runs/ddp-check/RUN_ID:/runs/ddp-check/RUN_ID -v /work/job:/work/job -v /usr:/usr:ro -v /etc:/etc:ro --workdir /work/job --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 localhost/hpctrain-test:latest)

# --- launch ---------------------------------------------------------------------------------
AGENT=()
LAUNCH=(srun --nodes="$NNODES" --ntasks="$NNODES" --ntasks-per-node=1 --cpus-per-task=2 --kill-on-bad-exit=1
  "${CONTAINER[@]}" "${AGENT[@]}" python "$RUN_DIR/rank" launch 60 --nnodes="$NNODES" --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint="$HEAD:$PORT" --rdzv-id="$HPCTRAIN_JOB_ID" --rdzv-conf="join_timeout=600,last_call_timeout=30,close_timeout=60" --max-restarts=0
  "$RUN_DIR/rank" run "$RUN_DIR/bootstrap.json")

# --- preflight: every node reaches the head on the rendezvous port (rank/preflight.py) -------
# Without it, a node that cannot reach the head makes torchrun wait its join_timeout and the job
# hang until the time limit; here the job stops within 60 s and names the node.
export HPCTRAIN_NODES
HPCTRAIN_NODES=$(echo "$NODELIST" | paste -sd, -)
# In the launch step itself, before torchrun on each node: launch.sh.j2 reads the verdict.
rm -f "$RUN_DIR/status/preflight.json" "$RUN_DIR"/status/preflight-failed-*.txt
log "preflight: $NNODES nodes must reach $HEAD:$PORT within 60 s (in the launch step)"
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
# A node check that failed ended the launch before torchrun: each failing node wrote why.
if (( STATUS != 0 )) && PROBLEM=$(cat "$RUN_DIR"/status/preflight-failed-*.txt 2>/dev/null | paste -sd';' -) && [[ -n $PROBLEM ]]; then
  record_failure preflight "$STATUS" "preflight failed: $PROBLEM"
  die "preflight failed (status $STATUS): $PROBLEM"
fi
if (( STATUS != 0 )); then
  record_failure ranks "$STATUS"
  die "the ranks exited with status $STATUS; per-rank logs: $RUN_DIR/logs/rank-*.log"
fi
archive_failure
log "done: all ranks exited 0"

#!/bin/bash
#
# ddp-check on site 'localcluster': 2 node(s) x 1 rank(s), rendered by hpctrain 0.1.0.
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
  out=$(python "$RUN_DIR/rank" summarize "$RUN_DIR" "$@" 2>&1) || out="could not write status/failure.json: $out"
  while IFS= read -r line; do log "failure: $line"; done <<<"$out"
}
# An earlier attempt's failure (the one that requeued this job, a hang a restart got past) goes
# to status/failures.jsonl: failure.json speaks of this attempt only.
archive_failure() {
  [[ ! -e "$RUN_DIR/status/failure.json" ]] || python "$RUN_DIR/rank" archive "$RUN_DIR" || true
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
  said=$(python "$RUN_DIR/rank" stopped "$RUN_DIR" "$sig" "$1" "$STARTED" 2>&1) || return 0
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

# --- launch ---------------------------------------------------------------------------------
AGENT=()
LAUNCH=(srun --nodes="$NNODES" --nodelist="$CHOSEN" --ntasks="$NNODES" --ntasks-per-node=1 --cpus-per-task=1 --gpus-per-node=1 --kill-on-bad-exit=1
  "${AGENT[@]}" python "$RUN_DIR/rank" launch 60 --nnodes="$NNODES" --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint="$HEAD:$PORT" --rdzv-id="$HPCTRAIN_JOB_ID" --rdzv-conf="join_timeout=600,last_call_timeout=30,close_timeout=60" --max-restarts=0
  "$RUN_DIR/rank" run "$RUN_DIR/bootstrap.json")

# --- preflight: every node reaches the head on the rendezvous port (rank/before/preflight.py) -------
# First each node's health gate (rank/before/health.py): its GPUs, read from nvidia-smi; a node that
# fails it is named with the GPU and the reason, and the requeue leaves it out.
# Without it, a node that cannot reach the head makes torchrun wait its join_timeout and the job
# hang until the time limit; here the job stops within 60 s and names the node.
export HPCTRAIN_NODES
HPCTRAIN_NODES=$(echo "$NODELIST" | paste -sd, -)
# In the launch step itself, before torchrun on each node: launch.sh.j2 reads the verdict.
rm -f "$RUN_DIR/status/preflight.json" "$RUN_DIR"/status/preflight-failed-*.txt "$RUN_DIR"/status/health/*.json
log "preflight: $NNODES nodes must reach $HEAD:$PORT within 60 s (in the launch step)"

# --- hang detection (rank/during/watch.py) -----------------------------------------------------------
# A watcher beside the launch: when no rank has progressed for 300 s (launcher.hang_timeout) it
# names the stuck ranks in status/failure.json and exits 3; the ranks are then ended on every
# node (a stack dump in each rank's log first) and torchrun restarts them from the newest
# checkpoint while launcher.max_restarts allows; after that the job ends (and is requeued).
# PyTorch's flight recorder counts every collective of each rank (gloo's and NCCL's): the watcher
# asks each rank for its dump, and the rank whose last collective lags the others' is named
# (rank/during/flight.py). A value of your own (TORCH_FR_BUFFER_SIZE, or TORCH_NCCL_TRACE_BUFFER_SIZE) wins.
export TORCH_FR_BUFFER_SIZE="${TORCH_FR_BUFFER_SIZE:-${TORCH_NCCL_TRACE_BUFFER_SIZE:-2000}}"
HANGS=0
watch_start() {
  python "$RUN_DIR/rank" watch "$RUN_DIR" 300 &
  WATCHER=$!
}
watch_stop() {
  kill "$WATCHER" 2>/dev/null || true
  wait "$WATCHER" 2>/dev/null || true
}
watch_check() {
  kill -0 "$WATCHER" 2>/dev/null && return 0
  local status=0
  wait "$WATCHER" || status=$?
  if (( status == 3 )); then
    HANGS=$(( HANGS + 1 ))
    log "hang: no rank has progressed for 300 s: ending the ranks (status/failure.json names the stuck ones)"
    srun --overlap --nodes="$NNODES" --nodelist="$CHOSEN" --ntasks="$NNODES" --ntasks-per-node=1 --cpus-per-task=1 python "$RUN_DIR/rank" kill-ranks "$RUN_DIR" || log "hang: could not end every rank"
  fi
  watch_start
}
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
watch_start
# Once a second (a trapped signal cuts the wait short, and `wait -n` the launch's end: a study's
# worker starts its next trial at once): a signal to handle, a hang to end.
while kill -0 "$CHILD" 2>/dev/null; do
  watch_check
  sleep 1 &
  wait -n || true
done
wait "$CHILD" || STATUS=$?
watch_stop
# Ranks whose rate stayed below 0.8x the median for 300 s are named (rank/during/slow.py, status/slow.json).
SLOW=$(python "$RUN_DIR/rank" slow "$RUN_DIR" 0 2>&1) || true
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
  REASON=ranks
  (( HANGS == 0 )) || REASON=hang
  record_failure "$REASON" "$STATUS"
  die "the ranks exited with status $STATUS; per-rank logs: $RUN_DIR/logs/rank-*.log"
fi
archive_failure
log "done: all ranks exited 0"

#!/bin/bash
#SBATCH --job-name=isaac3-kitless-rsl_rl
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=32
#SBATCH --gpus-per-node=4
#SBATCH --mem-per-cpu=4048M
#SBATCH --time=04:00:00
#SBATCH --output=/runs/isaac3-kitless-rsl_rl/RUN_ID/logs/slurm-%j.out
#SBATCH --open-mode=append
#SBATCH --signal=B:USR2@120
#SBATCH --requeue
#
# isaac3-kitless-rsl_rl on site 'containers': 2 node(s) x 4 rank(s), rendered by hpctrain 0.1.0.
# Each rank runs: -m isaaclab train --rl_library rsl_rl --task=Isaac-Cartpole --distributed --run_timestamp=hpctrain
# This file is the whole job: resubmit it by hand with  sbatch /runs/isaac3-kitless-rsl_rl/RUN_ID/job.sbatch
set -euo pipefail

RUN_DIR=/runs/isaac3-kitless-rsl_rl/RUN_ID
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

# --- requeue (Slurm) --------------------------------------------------------------------------
# Requeue from this shell, on the host (the training process may run in a container without
# scontrol), capped by SLURM_RESTART_COUNT, which Slurm leaves unset on the first run.
JOB_REF=$SLURM_JOB_ID
if [[ -n "${SLURM_ARRAY_JOB_ID:-}" && -n "${SLURM_ARRAY_TASK_ID:-}" ]]; then
  JOB_REF="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"  # this task, not the whole array
fi

# Slurm's view of this job: "ending" while it is cancelled (scancel) or timed out — never
# requeued —, "preempted" once a preemption is under way (PreemptTime is set: the ranks got
# SIGTERM, this shell gets it only at the end of the grace time), "running" otherwise (the
# time-limit warning, or a signal sent by hand or a site's tooling).
job_view() {
  local info
  info=$(scontrol -o show job "$SLURM_JOB_ID" 2>/dev/null) || { echo running; return; }
  case " $info " in
    *" JobState=RUNNING "*) ;;
    *) echo ending; return ;;
  esac
  case " $info " in
    *" PreemptTime=None "*) echo running ;;
    *) echo preempted ;;
  esac
}

# The nodes the job leaves out (its ExcNodeList: sbatch --exclude, earlier requeues) and NODES
# (comma-separated), as one comma-separated list.
left_out_with() {  # NODES
  local current
  current=$(scontrol -o show job "$SLURM_JOB_ID" | grep -o 'ExcNodeList=[^ ]*' | cut -d= -f2) || true
  [[ "$current" != "(null)" ]] || current=""
  { [[ -z "$current" ]] || scontrol show hostnames "$current"; tr ',' '\n' <<<"$1"; } | sort -u | paste -sd, -
}

# Why no node can take the place of NODES (comma-separated), or status 1 when one can: the
# job's partition(s) must hold as many nodes as it needs that are up (idle, allocated, mixed,
# completing) and not left out. Otherwise a requeue could only wait for ever, or run on the bad
# node again: the caller ends the job, naming the node and its fault.
no_spare() {  # NODES
  local info parts need left usable
  info=$(scontrol -o show job "$SLURM_JOB_ID" 2>/dev/null) || return 1
  parts=$(grep -o ' Partition=[^ ]*' <<<" $info" | cut -d= -f2) || return 1
  need=$(grep -o ' NumNodes=[0-9]*' <<<" $info" | cut -d= -f2) || return 1
  left=$(left_out_with "$1") || return 1
  usable=$(sinfo -h -N -p "$parts" -o '%N %t' 2>/dev/null | awk '$2 ~ /^(idle|alloc|mix|comp)$/ {print $1}' | sort -u | comm -23 - <(tr ',' '\n' <<<"$left" | sort -u) | wc -l) || return 1
  (( usable < need )) || return 1
  echo "no node can take the place of $1: partition $parts has $usable usable node(s) besides those left out ($left), the job needs $need"
}

# Whether Slurm requeues this job itself when this script ends during a preemption's grace time:
# from 24.05 on (NEWS 24.05.0rc1, "assume that job signalled for GraceTime was preempted") with
# PreemptMode=REQUEUE it does, whatever the exit status. A `scontrol requeue` there would leave
# that mark on the job (slurmctld clears it only on its own requeue): its next run would be
# requeued once more when it ends, and run again (docs/slurm-releases.md). 22.05 does not.
slurm_requeues_preempted() {
  local version mode
  version=$(scontrol show config 2>/dev/null | sed -n 's/^SLURM_VERSION *= *\([0-9]*\)\.\([0-9]*\)\..*/\1 \2/p') || return 1
  [[ "$version" =~ ^([0-9]{1,4})\ ([0-9]{1,4})$ ]] || return 1
  (( 10#${BASH_REMATCH[1]} * 100 + 10#${BASH_REMATCH[2]} >= 2405 )) || return 1
  mode=$(scontrol -o show partition "${SLURM_JOB_PARTITION%%,*}" 2>/dev/null | grep -o ' PreemptMode=[^ ]*' | cut -d= -f2) || return 1
  [[ ",$mode," == *,REQUEUE,* ]]
}

# Before ending a preempted job for good: Slurm 24.05+ would requeue it anyway (above) unless
# it is no longer requeueable.
keep_ended() {  # VIEW
  [[ "$1" == preempted ]] || return 0
  scontrol update JobId="$JOB_REF" Requeue=0 >/dev/null 2>&1 || log "preemption: could not make job $JOB_REF non-requeueable; Slurm 24.05+ may requeue it"
}

# Requeue now, leaving NODES (comma-separated) out of the next allocation. Slurm ends this
# shell at once; a job's ExcNodeList can change only while it is pending, so with nodes to
# leave out it is requeued held, changed, released — those three with the signals ignored.
# During a preemption on Slurm 24.05+, Slurm requeues the job when this script ends: it ends.
requeue_job() {  # [NODES]
  local nodes=${1:-} out all
  if [[ "$(job_view)" == preempted ]] && slurm_requeues_preempted; then
    [[ -z "$nodes" ]] || log "preemption: $nodes not left out: Slurm requeues this preempted job itself, and a job's ExcNodeList changes only while it is pending"
    log "preemption: ending this run; Slurm requeues job $JOB_REF itself (Slurm 24.05+, PreemptMode=REQUEUE)"
    exit 0
  fi
  if [[ -z "$nodes" ]]; then
    out=$(scontrol requeue "$JOB_REF" 2>&1) || { record_failure requeue 75 "scontrol requeue $JOB_REF failed: $out"; die "scontrol requeue $JOB_REF failed: $out"; }
  else
    all=$(left_out_with "$nodes")
    out=$(trap '' TERM HUP INT; scontrol requeuehold "$JOB_REF" 2>&1 && scontrol update JobId="$JOB_REF" ExcNodeList="$all" 2>&1 && scontrol release "$JOB_REF" 2>&1) || { record_failure requeue 75 "requeue of $JOB_REF without $all failed: $out"; die "requeue of $JOB_REF without $all failed: $out"; }
  fi
  # Slurm now ends this run (SIGTERM, then SIGKILL) and queues the job again.
  sleep 300 &
  wait $! || true
  exit 0
}

# After a signal: requeue (the next run resumes from the newest checkpoint), or end.
requeue_or_end() {  # VIEW
  local why="the time-limit warning or a signal sent to the job"
  [[ "$1" != preempted ]] || why="preempted by the scheduler"
  local count=${SLURM_RESTART_COUNT:-0}
  if (( count >= 3 )); then
    record_failure preempted 75 "$why and not requeued: job $JOB_REF has been requeued $count time(s), the limit is preemption.max_requeues=3; hpctrain submit --resume $RUN_DIR continues it"
    log "preemption: not requeueing: job $JOB_REF has been requeued $count time(s), the limit is preemption.max_requeues=3"
    keep_ended "$1"
    exit 75
  fi
  log "preemption: $why: requeueing job $JOB_REF (requeue $(( count + 1 )) of at most 3); the next run resumes from the newest checkpoint"
  requeue_job "${SLOW_NODES:-}"  # the slow ranks' nodes, with health.exclude_slow_nodes (rank/during/slow.py)
}

# Whether the job's required node list (sbatch nodelist) names one of NODES (comma-separated):
# Slurm keeps a job pending forever (BadConstraints) that must both use and avoid a node.
required_among() {  # NODES
  local req
  req=$(scontrol -o show job "$SLURM_JOB_ID" 2>/dev/null | grep -o 'ReqNodeList=[^ ]*' | cut -d= -f2) || return 1
  [[ -n "$req" && "$req" != "(null)" ]] || return 1
  comm -12 <(scontrol show hostnames "$req" | sort -u) <(tr ',' '\n' <<<"$1" | sort -u) | grep -q .
}

# After a failure recorded in status/failure.json: a requeue when it may help (a node's fault,
# a hang: rank/end/recovery.py), leaving the nodes it blames out; otherwise the caller ends the job.
requeue_after_failure() {
  # A cancel during a step fails the step too (the preflight, or the ranks): what Slurm is doing
  # to the job decides first, so that a cancelled or timed-out job is never requeued. A node that
  # failed its check wins over any other signal: requeued, the job must leave that node out.
  local view
  view=$(job_view)
  if [[ "$view" == ending ]] || { [[ -n "$SIGNALLED" ]] && ! node_failed; }; then
    after_signal "$view"
  fi
  local count=${SLURM_RESTART_COUNT:-0} verdict="" nodes="" why="" spare
  read -r verdict nodes why < <(python3 "$RUN_DIR/rank" recover "$RUN_DIR" 2 2>&1) || true
  if [[ "$verdict" != requeue ]]; then
    log "recovery: not requeueing: ${why:-$verdict}"
    keep_ended "$view"
    return 0
  fi
  if (( count >= 3 )); then
    log "recovery: not requeueing after the $why: job $JOB_REF has been requeued $count time(s), the limit is preemption.max_requeues=3"
    keep_ended "$view"
    return 0
  fi
  [[ "$nodes" != "-" ]] || nodes=""
  if [[ -n "$nodes" ]] && required_among "$nodes"; then
    log "recovery: not requeueing after the $why: the job requires those nodes (its node list names them), so a requeue without them could never start"
    keep_ended "$view"
    return 0
  fi
  if [[ -n "$nodes" ]] && spare=$(no_spare "$nodes"); then
    log "recovery: not requeueing after the $why: $spare"
    keep_ended "$view"
    return 0
  fi
  log "recovery: $why: requeueing job $JOB_REF${nodes:+ without $nodes} (requeue $(( count + 1 )) of at most 3); the next run resumes from the newest checkpoint"
  requeue_job "$nodes"
}

# --- preemption and SIGTERM (hpctrain/job/preemption.py) ---------------------------------------
# The scheduler sends SIGUSR2 to this shell 120 s (up to 60 s more) before the time limit; a
# preemption or a cancel sends SIGTERM (a preemption only to the ranks, until its grace time ends).
# Either means "save now": it is forwarded to the ranks, which get 90 s to save; then the
# scheduler's view of the job decides (job_view, above): cancelled -> the job ends; preempted or
# still running -> requeue_or_end.
SIGNALLED=""
SIGNALLED_AT=0
on_signal() {  # SIG
  if [[ -n "$SIGNALLED" ]]; then
    log "preemption: SIG$1 (already handling SIG$SIGNALLED)"
    return
  fi
  SIGNALLED=$1
  SIGNALLED_AT=$SECONDS
  if [[ -n "${CHILD:-}" ]] && kill -0 "$CHILD" 2>/dev/null; then
    log "preemption: SIG$1 received; forwarded to the ranks, they have 90 s to save"
    kill -s "$1" "$CHILD" 2>/dev/null || log "preemption: could not forward SIG$1 (the launch just ended?)"
  elif [[ -n "${CHILD:-}" ]]; then
    log "preemption: SIG$1 received after the ranks exited"
  else
    log "preemption: SIG$1 received before the ranks started"
  fi
}
trap 'on_signal USR2' USR2
trap 'on_signal TERM' TERM

# After the forwarded signal: give the ranks the grace period to save and exit.
wait_for_grace() {
  local deadline=$(( SIGNALLED_AT + 90 ))
  while kill -0 "$CHILD" 2>/dev/null && (( SECONDS < deadline )); do
    sleep 1 &
    wait $! || true
  done
  if kill -0 "$CHILD" 2>/dev/null; then
    log "preemption: the ranks still run after the grace period (90 s, preemption.grace)"
    return
  fi
  STATUS=0
  wait "$CHILD" || STATUS=$?
  REAPED=1
  log "preemption: the ranks exited (status $STATUS) $(( SECONDS - SIGNALLED_AT )) s after the signal"
}

# The ranks write status/stop-R.json when a signal reaches them (rank/end/stop.py): a preemption
# signals them, not this shell.
ranks_signalled() {
  compgen -G "$RUN_DIR/status/stop-*.json" >/dev/null
}

# A node failed its check (rank/before/preflight.py writes status/preflight-failed-NODE.txt): the job
# failed there, whatever signals the launch's teardown sent the other nodes' processes.
node_failed() {
  compgen -G "$RUN_DIR/status/preflight-failed-*.txt" >/dev/null
}

# After a signal (this shell's, or the ranks' and the scheduler says it preempts the job).
after_signal() {  # VIEW
  local view=$1 sig=${SIGNALLED:-TERM}
  if [[ "$view" == ending ]]; then
    record_failure cancelled 143 "SIG$sig: the job was cancelled or reached its time limit (the scheduler is ending it): not requeued; hpctrain submit --resume $RUN_DIR continues it"
    log "preemption: SIG$sig and the scheduler is ending the job (cancelled, or its time limit): not requeueing"
    exit 143
  fi
  requeue_or_end "$view"
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
cd /runs/isaac3-kitless-rsl_rl/RUN_ID/code
export NCCL_SOCKET_IFNAME=ib
export ISAACSIM_ASSET_ROOT=/shared/isaac-assets
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=90
export WANDB_RUN_ID=run_id
export WANDB_RESUME=allow
export WANDB_DIR=/runs/isaac3-kitless-rsl_rl/RUN_ID
export HPCTRAIN_TENSORBOARD_DIR=/runs/isaac3-kitless-rsl_rl/RUN_ID/tensorboard
export HPCTRAIN_RUN_DIR=/runs/isaac3-kitless-rsl_rl/RUN_ID
export HPCTRAIN_JOB_NAME=isaac3-kitless-rsl_rl
export HPCTRAIN_SITE=containers
export HPCTRAIN_LIBRARY=rsl_rl

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


# --- container: apptainer (hpctrain/job/containers.py) --------------------------------
# This shell stays on the host; on every node the launch runs in $TMPDIR/images/isaac-lab-kitless.sif:
# the run and working directories are bound at the same paths.
# On every node: the image copied to node-local storage.
# shellcheck disable=SC2016,SC2154  # $NAME in container paths comes from the node's environment
PREPARE_OUT=$(srun --nodes="$NNODES" --ntasks="$NNODES" --ntasks-per-node=1 --cpus-per-task=1 bash -c 'set -eu
if [[ -n "$1" ]]; then
  mkdir -p "$2"
  target="$2/$(basename "$1")"
  [[ "$target" -nt "$1" ]] || { cp "$1" "$target.$$.part" && mv -f "$target.$$.part" "$target"; }
fi
shift 2
for d in "$@"; do mkdir -p "$d"; done' hpctrain-prepare "${SCRATCH}"/images/isaac-lab-kitless.sif "${TMPDIR}"/images 2>&1) || {
  record_failure container 1 "preparing the container on the nodes failed: $PREPARE_OUT"
  die "preparing the container on the nodes failed: $PREPARE_OUT"
}
# --cleanenv: the ranks get only the variables named here, each exported per task from the
# task's own environment as APPTAINERENV_NAME (a secret's value never appears in this
# file nor in an argument list that other users of the node could read).
# shellcheck disable=SC2016,SC2154
CONTAINER=(bash -c 'for v in NCCL_SOCKET_IFNAME ISAACSIM_ASSET_ROOT TORCH_ELASTIC_SHUTDOWN_TIMEOUT WANDB_RUN_ID WANDB_RESUME WANDB_DIR HPCTRAIN_TENSORBOARD_DIR HPCTRAIN_RUN_DIR HPCTRAIN_JOB_NAME HPCTRAIN_SITE HPCTRAIN_LIBRARY HPCTRAIN_JOB_ID HPCTRAIN_PORT HPCTRAIN_SPARE_PORT HPCTRAIN_HEAD HPCTRAIN_NODES SLURM_JOB_ID SLURM_STEP_ID SLURM_PROCID SLURM_LOCALID SLURM_NODEID SLURM_NTASKS SLURM_NTASKS_PER_NODE SLURM_CPUS_PER_TASK SLURMD_NODENAME SLURM_JOB_NODELIST SLURM_RESTART_COUNT SLURM_ARRAY_JOB_ID SLURM_ARRAY_TASK_ID CUDA_VISIBLE_DEVICES NVIDIA_VISIBLE_DEVICES TORCH_FR_BUFFER_SIZE TORCH_NCCL_TRACE_BUFFER_SIZE; do [[ -z "${!v+x}" ]] || export "APPTAINERENV_$v=${!v}"; done; exec "$@"' hpctrain-container
  apptainer exec --cleanenv --nv --bind /runs/isaac3-kitless-rsl_rl/RUN_ID:/runs/isaac3-kitless-rsl_rl/RUN_ID --bind /work/job:/work/job --bind /shared/isaac-assets:/shared/isaac-assets:ro --pwd /work/job --writable-tmpfs "${TMPDIR}"/images/isaac-lab-kitless.sif)

# --- launch ---------------------------------------------------------------------------------
# torchrun's agent does not handle SIGUSR2, whose default action would kill it and its ranks
# unsaved: start it with the signal ignored. Each rank's bootstrap takes it (rank/end/stop.py).
# shellcheck disable=SC2016
AGENT=(bash -c 'trap "" USR2; exec "$@"' hpctrain-agent)
LAUNCH=(srun --nodes="$NNODES" --ntasks="$NNODES" --ntasks-per-node=1 --cpus-per-task=32 --gpus-per-node=4 --kill-on-bad-exit=1
  "${CONTAINER[@]}" "${AGENT[@]}" python3 "$RUN_DIR/rank" launch 60 --nnodes="$NNODES" --nproc-per-node=4 --rdzv-backend=c10d --rdzv-endpoint="$HEAD:$PORT" --rdzv-id="$HPCTRAIN_JOB_ID" --rdzv-conf="join_timeout=600,last_call_timeout=30,close_timeout=60" --max-restarts=0
  "$RUN_DIR/rank" run "$RUN_DIR/bootstrap.json")

# --- preflight: every node reaches the head on the rendezvous port (rank/before/preflight.py) -------
# First each node's health gate (rank/before/health.py): its GPUs, read from nvidia-smi; a node that
# fails it is named with the GPU and the reason, and the requeue leaves it out.
# Without it, a node that cannot reach the head makes torchrun wait its join_timeout and the job
# hang until the time limit; here the job stops within 60 s and names the node.
# A cancel or preemption during the setup above: no preflight, no launch.
[[ -z "$SIGNALLED" ]] || after_signal "$(job_view)"
export HPCTRAIN_NODES
HPCTRAIN_NODES=$(echo "$NODELIST" | paste -sd, -)
# In the launch step itself, before torchrun on each node: launch.sh.j2 reads the verdict.
rm -f "$RUN_DIR/status/preflight.json" "$RUN_DIR"/status/preflight-failed-*.txt "$RUN_DIR"/status/health/*.json
log "preflight: $NNODES nodes must reach $HEAD:$PORT within 60 s (in the launch step)"
[[ -z "$SIGNALLED" ]] || after_signal "$(job_view)"
rm -f "$RUN_DIR"/status/stop-*.json  # an earlier attempt's
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
REAPED=0
# Once a second (a trapped signal cuts the wait short, and `wait -n` the launch's end: a study's
# worker starts its next trial at once): a signal to handle, a hang to end.
while kill -0 "$CHILD" 2>/dev/null; do
  if [[ -n "$SIGNALLED" ]]; then
    wait_for_grace
    break
  fi
  sleep 1 &
  wait -n || true
done
if (( ! REAPED )); then
  if kill -0 "$CHILD" 2>/dev/null; then
    STATUS=124  # still running after the grace period
  else
    wait "$CHILD" || STATUS=$?
  fi
fi
# Ranks whose rate stayed below 0.8x the median for 300 s are named (rank/during/slow.py, status/slow.json).
SLOW=$(python3 "$RUN_DIR/rank" slow "$RUN_DIR" 2 2>&1) || true
while IFS= read -r line; do [[ -z "$line" ]] || log "$line"; done <<<"$SLOW"
if (( STATUS != 0 )) && node_failed; then
  # A node failed its check; the launch's teardown then signalled the other nodes' processes.
  # Their stop notes, or a signal meanwhile, did not end the job: the node's failure (below)
  # did, and a requeue leaves that node out. Only a cancel or the time limit goes first.
  VIEW=$(job_view)
  [[ "$VIEW" != ending ]] || after_signal "$VIEW"
elif [[ -n "$SIGNALLED" ]]; then
  after_signal "$(job_view)"
elif (( STATUS != 0 )) || ranks_signalled; then
  # A preemption signals the ranks only: they stopped (or died) on their own.
  VIEW=$(job_view)
  [[ "$VIEW" == running ]] || after_signal "$VIEW"
fi
# A node check that failed ended the launch before torchrun: each failing node wrote why.
if (( STATUS != 0 )) && PROBLEM=$(cat "$RUN_DIR"/status/preflight-failed-*.txt 2>/dev/null | paste -sd';' -) && [[ -n $PROBLEM ]]; then
  record_failure preflight "$STATUS" "preflight failed: $PROBLEM"
  requeue_after_failure
  die "preflight failed (status $STATUS): $PROBLEM"
fi
if (( STATUS != 0 )); then
  record_failure ranks "$STATUS"
  requeue_after_failure
  die "the ranks exited with status $STATUS; per-rank logs: $RUN_DIR/logs/rank-*.log"
fi
archive_failure
log "done: all ranks exited 0"

#!/bin/bash
#
# ddp-check on site 'containers': 2 node(s) x 4 rank(s), rendered by hpctrain 0.1.0.
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
  out=$(python3 "$RUN_DIR/rank" summarize "$RUN_DIR" "$@" 2>&1) || out="could not write status/failure.json: $out"
  while IFS= read -r line; do log "failure: $line"; done <<<"$out"
}
# An earlier attempt's failure (the one that requeued this job, a hang a restart got past) goes
# to status/failures.jsonl: failure.json speaks of this attempt only.
archive_failure() {
  [[ ! -e "$RUN_DIR/status/failure.json" ]] || python3 "$RUN_DIR/rank" archive "$RUN_DIR" || true
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
export NCCL_SOCKET_IFNAME=ib
export WANDB_PROJECT='it'"'"'s quoted'
export ACCEPT_EULA=Y
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=90
export WANDB_RUN_ID=run_id
export WANDB_RESUME=allow
export WANDB_DIR=/runs/ddp-check/RUN_ID
export HPCTRAIN_TENSORBOARD_DIR=/runs/ddp-check/RUN_ID/tensorboard
export HPCTRAIN_RUN_DIR=/runs/ddp-check/RUN_ID
export HPCTRAIN_JOB_NAME=ddp-check
export HPCTRAIN_SITE=containers
export HPCTRAIN_LIBRARY=command
[[ -n "${WANDB_API_KEY:-}" ]] || die "secret WANDB_API_KEY is not set: export it where you submit (its value is never written to disk)"
# The interactive step's own task variables would shape the launch's steps (srun reads them):
# the shell sees the job's, as the batch shell does.
unset SLURM_DISTRIBUTION SLURM_NNODES SLURM_NTASKS SLURM_NPROCS SLURM_CPUS_PER_TASK SLURM_TASKS_PER_NODE
export SLURM_NNODES=$SLURM_JOB_NUM_NODES

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

# --- container: apptainer (hpctrain/job/containers.py) --------------------------------
# This shell stays on the host; on every node the launch runs in $TMPDIR/images/train.sif:
# the run and working directories are bound at the same paths.
# On every node: the image copied to node-local storage.
# shellcheck disable=SC2016,SC2154  # $NAME in container paths comes from the node's environment
PREPARE_OUT=$( bash -c 'set -eu
if [[ -n "$1" ]]; then
  mkdir -p "$2"
  target="$2/$(basename "$1")"
  [[ "$target" -nt "$1" ]] || { cp "$1" "$target.$$.part" && mv -f "$target.$$.part" "$target"; }
fi
shift 2
for d in "$@"; do mkdir -p "$d"; done' hpctrain-prepare /scratch/images/train.sif "${TMPDIR}"/images 2>&1) || {
  record_failure container 1 "preparing the container on the nodes failed: $PREPARE_OUT"
  die "preparing the container on the nodes failed: $PREPARE_OUT"
}
# --cleanenv: the ranks get only the variables named here, each exported per task from the
# task's own environment as APPTAINERENV_NAME (a secret's value never appears in this
# file nor in an argument list that other users of the node could read).
# shellcheck disable=SC2016,SC2154
CONTAINER=(bash -c 'for v in NCCL_SOCKET_IFNAME WANDB_PROJECT ACCEPT_EULA TORCH_ELASTIC_SHUTDOWN_TIMEOUT WANDB_RUN_ID WANDB_RESUME WANDB_DIR HPCTRAIN_TENSORBOARD_DIR HPCTRAIN_RUN_DIR HPCTRAIN_JOB_NAME HPCTRAIN_SITE HPCTRAIN_LIBRARY WANDB_API_KEY HPCTRAIN_JOB_ID HPCTRAIN_PORT HPCTRAIN_SPARE_PORT HPCTRAIN_HEAD HPCTRAIN_NODES SLURM_JOB_ID SLURM_STEP_ID SLURM_PROCID SLURM_LOCALID SLURM_NODEID SLURM_NTASKS SLURM_NTASKS_PER_NODE SLURM_CPUS_PER_TASK SLURMD_NODENAME SLURM_JOB_NODELIST SLURM_RESTART_COUNT SLURM_ARRAY_JOB_ID SLURM_ARRAY_TASK_ID CUDA_VISIBLE_DEVICES NVIDIA_VISIBLE_DEVICES TORCH_FR_BUFFER_SIZE TORCH_NCCL_TRACE_BUFFER_SIZE; do [[ -z "${!v+x}" ]] || export "APPTAINERENV_$v=${!v}"; done; exec "$@"' hpctrain-container
  apptainer exec --cleanenv --nv --bind /runs/ddp-check/RUN_ID:/runs/ddp-check/RUN_ID --bind /work/job:/work/job --bind /data:/data:ro --bind "${HOME}"/.netrc:"${HOME}"/.netrc --pwd /work/job --writable-tmpfs "${TMPDIR}"/images/train.sif)

# --- the shell in the container ---------------------------------------------------------------
# The shell runs in the job's container on this node, with what the ranks get there: the
# image, the binds, the job's variables, the working directory (the step runs `in_container`
# after this file). `hpctrain launch` typed there ends it; the launch runs here on the host,
# where srun is, with this terminal; then the container's shell starts again (a new one: what
# was set in the last one is gone).
CONTAINER_SHELL=("${CONTAINER[@]}")
{
  printf 'HPCTRAIN_SHELL_RUN=%q\n' "$RUN_DIR"
  cat <<'RC'
hpctrain() {
  if [[ $# -eq 1 && $1 == launch ]]; then
    : >"$HPCTRAIN_SHELL_RUN/status/launch-request"
    exit 0
  fi
  echo "hpctrain: in the container only 'hpctrain launch' works: it runs the launch on the host and comes back here" >&2
  return 2
}
if [[ -s $HPCTRAIN_SHELL_RUN/status/launch-status ]]; then
  echo "hpctrain launch: exit status $(cat "$HPCTRAIN_SHELL_RUN/status/launch-status")"
fi
RC
  printf 'PS1=%q\n' '[ddp-check] (container) \h:\w\$ '
} >"$RUN_DIR/container.rc"
in_container() {
  local status
  rm -f "$RUN_DIR/status/launch-status"
  while true; do
    rm -f "$RUN_DIR/status/launch-request"
    "${CONTAINER_SHELL[@]}" bash --rcfile "$RUN_DIR/container.rc" -i
    status=$?
    [[ -e $RUN_DIR/status/launch-request ]] || return "$status"
    bash "$RUN_DIR/launch.sh"
    echo "$?" >"$RUN_DIR/status/launch-status"
  done
}

#!/bin/bash
#SBATCH --job-name=boxed-export
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --gpus-per-node=1
#SBATCH --mem-per-cpu=4048M
#SBATCH --time=00:30:00
#SBATCH --output=/work/runs/boxed-export/20260102-000000-expo/logs/slurm-%j.out
#SBATCH --open-mode=append
#
# boxed-export on site 'containers': 1 node(s) x 1 rank(s), rendered by hpctrain 0.1.0.
# Each rank runs: -m _hpctrain_rank.after.export /work/runs/boxed/20260101-000000-tr01 rsl_rl logs/rsl_rl/cartpole/hpctrain/model_5.pt model_5
# This file is the whole job: resubmit it by hand with  sbatch /work/runs/boxed-export/20260102-000000-expo/job.sbatch
set -euo pipefail

RUN_DIR=/work/runs/boxed-export/20260102-000000-expo
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
cd /work
export WANDB_MODE=offline
export WANDB_RUN_ID=20260102-000000-expo
export WANDB_RESUME=allow
export WANDB_DIR=/work/runs/boxed-export/20260102-000000-expo
export HPCTRAIN_TENSORBOARD_DIR=/work/runs/boxed-export/20260102-000000-expo/tensorboard
export HPCTRAIN_RUN_DIR=/work/runs/boxed-export/20260102-000000-expo
export HPCTRAIN_JOB_NAME=boxed-export
export HPCTRAIN_SITE=containers
export HPCTRAIN_LIBRARY=command

# --- nodes (Slurm) --------------------------------------------------------------------------
NNODES=1
export HPCTRAIN_JOB_ID=$SLURM_JOB_ID
export HPCTRAIN_ATTEMPT=${SLURM_RESTART_COUNT:-0}  # each requeue starts a new attempt
[[ "${SLURM_JOB_NUM_NODES:-}" == "$NNODES" ]] || die "the allocation has ${SLURM_JOB_NUM_NODES:-?} node(s), the job was planned for $NNODES: render it again with --set resources.nodes=N instead of overriding -N"

# --- rendezvous -----------------------------------------------------------------------------
# Derived from the job's id, the same on every node, above the kernel's ephemeral port range.
PORT=$(( 61000 + 2 * (HPCTRAIN_JOB_ID % 2268) ))
export HPCTRAIN_PORT=$PORT HPCTRAIN_SPARE_PORT=$(( PORT + 1 ))
export HPCTRAIN_HEAD=localhost


# --- container: apptainer (hpctrain/job/containers.py) --------------------------------
# This shell stays on the host; on every node the launch runs in /images/lab.sif:
# the run and working directories are bound at the same paths.
# On every node: the persistent cache directories.
# shellcheck disable=SC2016,SC2154  # $NAME in container paths comes from the node's environment
PREPARE_OUT=$(srun --nodes="$NNODES" --ntasks="$NNODES" --ntasks-per-node=1 --cpus-per-task=1 bash -c 'set -eu
if [[ -n "$1" ]]; then
  mkdir -p "$2"
  target="$2/$(basename "$1")"
  [[ "$target" -nt "$1" ]] || { cp "$1" "$target.$$.part" && mv -f "$target.$$.part" "$target"; }
fi
shift 2
for d in "$@"; do mkdir -p "$d"; done' hpctrain-prepare '' '' /scratch/isaac-sim/cache/kit /scratch/isaac-sim/cache/ov /scratch/isaac-sim/cache/pip /scratch/isaac-sim/cache/glcache /scratch/isaac-sim/cache/computecache /scratch/isaac-sim/logs /scratch/isaac-sim/data /scratch/isaac-sim/documents 2>&1) || {
  record_failure container 1 "preparing the container on the nodes failed: $PREPARE_OUT"
  die "preparing the container on the nodes failed: $PREPARE_OUT"
}
# --cleanenv: the ranks get only the variables named here, each exported per task from the
# task's own environment as APPTAINERENV_NAME (a secret's value never appears in this
# file nor in an argument list that other users of the node could read).
# shellcheck disable=SC2016,SC2154
CONTAINER=(bash -c 'for v in WANDB_MODE WANDB_RUN_ID WANDB_RESUME WANDB_DIR HPCTRAIN_TENSORBOARD_DIR HPCTRAIN_RUN_DIR HPCTRAIN_JOB_NAME HPCTRAIN_SITE HPCTRAIN_LIBRARY HPCTRAIN_JOB_ID HPCTRAIN_PORT HPCTRAIN_SPARE_PORT HPCTRAIN_HEAD HPCTRAIN_NODES SLURM_JOB_ID SLURM_STEP_ID SLURM_PROCID SLURM_LOCALID SLURM_NODEID SLURM_NTASKS SLURM_NTASKS_PER_NODE SLURM_CPUS_PER_TASK SLURMD_NODENAME SLURM_JOB_NODELIST SLURM_RESTART_COUNT SLURM_ARRAY_JOB_ID SLURM_ARRAY_TASK_ID CUDA_VISIBLE_DEVICES NVIDIA_VISIBLE_DEVICES TORCH_FR_BUFFER_SIZE TORCH_NCCL_TRACE_BUFFER_SIZE; do [[ -z "${!v+x}" ]] || export "APPTAINERENV_$v=${!v}"; done; exec "$@"' hpctrain-container
  apptainer exec --cleanenv --nv --bind /work/runs/boxed-export/20260102-000000-expo:/work/runs/boxed-export/20260102-000000-expo --bind /work:/work --bind /scratch/isaac-sim/cache/kit:/isaac-sim/kit/cache:rw --bind /scratch/isaac-sim/cache/ov:/root/.cache/ov:rw --bind /scratch/isaac-sim/cache/pip:/root/.cache/pip:rw --bind /scratch/isaac-sim/cache/glcache:/root/.cache/nvidia/GLCache:rw --bind /scratch/isaac-sim/cache/computecache:/root/.nv/ComputeCache:rw --bind /scratch/isaac-sim/logs:/root/.nvidia-omniverse/logs:rw --bind /scratch/isaac-sim/data:/root/.local/share/ov/data:rw --bind /scratch/isaac-sim/documents:/root/Documents:rw --bind /work/runs/boxed/20260101-000000-tr01:/work/runs/boxed/20260101-000000-tr01 --pwd /work /images/lab.sif)

# --- launch ---------------------------------------------------------------------------------
AGENT=()
LAUNCH=(srun --nodes="$NNODES" --ntasks="$NNODES" --ntasks-per-node=1 --cpus-per-task=8 --gpus-per-node=1 --kill-on-bad-exit=1
  "${CONTAINER[@]}" "${AGENT[@]}" python3 "$RUN_DIR/rank" agent --standalone --nnodes=1 --nproc-per-node=1 --max-restarts=0
  "$RUN_DIR/rank" run "$RUN_DIR/bootstrap.json")
# This attempt's start and the end of its set-up, for where its minutes before the first step go
# (rank/phases.py; the nodes and rank 0 add theirs).
PHASES="$RUN_DIR/status/phases/${HPCTRAIN_JOB_ID:-0}-${HPCTRAIN_ATTEMPT:-0}"
if mkdir -p "$PHASES"; then
  printf '{"started": "%s", "setup": "%s"}\n' "$HPCTRAIN_STARTED" "${EPOCHREALTIME:-$(date +%s.%N)}" >"$PHASES/shell.json" || true
fi
# Each node's health gate (rank/before/health.py) runs before torchrun's agent; a failing node writes why.
rm -f "$RUN_DIR"/status/preflight-failed-*.txt "$RUN_DIR"/status/health/*.json
log "launch: ${LAUNCH[*]}"
# In the background, so that signals reach this shell's traps while the ranks run.
"${LAUNCH[@]}" &
CHILD=$!
STATUS=0
wait "$CHILD" || STATUS=$?
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

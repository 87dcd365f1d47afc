#!/bin/bash
#SBATCH --job-name=policy-eval
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --gpus-per-node=1
#SBATCH --mem=1000M
#SBATCH --time=01:00:00
#SBATCH --partition=debug
#SBATCH --output=/work/runs/policy-eval/20260102-000000-eval/tasks/1/logs/slurm-%j.out
#SBATCH --open-mode=append
#
# policy-eval on site 'localcluster': 1 node(s) x 1 rank(s), rendered by hpctrain 0.1.0.
# Each rank runs: -m _hpctrain_rank.after.evaluate --run /work/runs/policy/20260101-000000-tr01 --checkpoint checkpoints/model_20.pt --episodes 4 --seed 7 --results program --out /work/runs/policy-eval/20260102-000000-eval/tasks/1/play --eval-run 20260102-000000-eval --method 'the program'"'"'s own command' --iteration 20 --steps 200 -- /opt/code/train.py --iterations 30
# This file is the whole job: resubmit it by hand with  sbatch /work/runs/policy-eval/20260102-000000-eval/tasks/1/job.sbatch
set -euo pipefail

RUN_DIR=/work/runs/policy-eval/20260102-000000-eval/tasks/1
log() { printf '[%s] hpctrain: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
mkdir -p "$RUN_DIR/logs" "$RUN_DIR/status"
# status/failure.json: why the job ended without success, for `hpctrain status` (and you).
record_failure() {  # REASON STATUS [MESSAGE]
  local out line
  out=$(/opt/venv/bin/python "$RUN_DIR/rank" summarize "$RUN_DIR" "$@" 2>&1) || out="could not write status/failure.json: $out"
  while IFS= read -r line; do log "failure: $line"; done <<<"$out"
}
# An earlier attempt's failure (the one that requeued this job, a hang a restart got past) goes
# to status/failures.jsonl: failure.json speaks of this attempt only.
archive_failure() {
  [[ ! -e "$RUN_DIR/status/failure.json" ]] || /opt/venv/bin/python "$RUN_DIR/rank" archive "$RUN_DIR" || true
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
export OMP_NUM_THREADS=1
export WANDB_MODE=offline
export WANDB_RUN_ID=20260102-000000-eval-1
export WANDB_RESUME=allow
export WANDB_DIR=/work/runs/policy-eval/20260102-000000-eval/tasks/1
export HPCTRAIN_TENSORBOARD_DIR=/work/runs/policy-eval/20260102-000000-eval/tasks/1/tensorboard
export HPCTRAIN_RUN_DIR=/work/runs/policy-eval/20260102-000000-eval/tasks/1
export HPCTRAIN_JOB_NAME=policy-eval
export HPCTRAIN_SITE=localcluster
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

# --- launch ---------------------------------------------------------------------------------
AGENT=()
LAUNCH=(srun --nodes="$NNODES" --ntasks="$NNODES" --ntasks-per-node=1 --cpus-per-task=1 --gpus-per-node=1 --kill-on-bad-exit=1
  "${AGENT[@]}" /opt/venv/bin/python "$RUN_DIR/rank" agent --standalone --nnodes=1 --nproc-per-node=1 --max-restarts=0
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

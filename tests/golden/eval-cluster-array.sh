#!/bin/bash
#SBATCH --job-name=policy-eval
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --gpus-per-node=1
#SBATCH --mem=1000M
#SBATCH --time=01:00:00
#SBATCH --partition=debug
#SBATCH --open-mode=append
#SBATCH --output=/work/runs/policy-eval/20260102-000000-eval/logs/slurm-%A_%a.out
#SBATCH --array=0-1%2
#
# policy-eval sweep on site 'localcluster': 2 task(s), 2 at a time, each 1 node(s) x 1 rank(s); rendered by hpctrain 0.1.0.
# Every task is a whole job in tasks/<i>/job.sbatch, with its own config, seed and logs.
# Resubmit the array with  sbatch /work/runs/policy-eval/20260102-000000-eval/job.sbatch ; one task alone with  sbatch /work/runs/policy-eval/20260102-000000-eval/tasks/<i>/job.sbatch
set -euo pipefail

RUN_DIR=/work/runs/policy-eval/20260102-000000-eval
TASK=${SLURM_ARRAY_TASK_ID:?"this script is a job array: submit it with sbatch"}
TASK_DIR="$RUN_DIR/tasks/$TASK"
[[ -f "$TASK_DIR/job.sbatch" ]] || { echo "hpctrain: no task $TASK in $RUN_DIR/tasks" >&2; exit 1; }
# exec: the task's own shell receives Slurm's signals (preemption, cancel) directly.
exec bash "$TASK_DIR/job.sbatch"

#!/bin/bash
#SBATCH --job-name=ddp-check
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=1000M
#SBATCH --time=00:10:00
#SBATCH --partition=debug
#SBATCH --open-mode=append
#SBATCH --signal=B:USR2@120
#SBATCH --requeue
#SBATCH --output=/runs/ddp-check/RUN_ID/logs/slurm-%A_%a.out
#SBATCH --dependency=afterok:4242
#SBATCH --kill-on-invalid-dep=yes
#SBATCH --array=0-1%2
#
# ddp-check sweep on site 'localcluster': 2 task(s), 2 at a time, each 1 node(s) x 1 rank(s); rendered by hpctrain 0.1.0.
# Every task is a whole job in tasks/<i>/job.sbatch, with its own config, seed and logs.
# Resubmit the array with  sbatch /runs/ddp-check/RUN_ID/job.sbatch ; one task alone with  sbatch /runs/ddp-check/RUN_ID/tasks/<i>/job.sbatch
set -euo pipefail

RUN_DIR=/runs/ddp-check/RUN_ID
TASK=${SLURM_ARRAY_TASK_ID:?"this script is a job array: submit it with sbatch"}
TASK_DIR="$RUN_DIR/tasks/$TASK"
[[ -f "$TASK_DIR/job.sbatch" ]] || { echo "hpctrain: no task $TASK in $RUN_DIR/tasks" >&2; exit 1; }
# exec: the task's own shell receives Slurm's signals (preemption, cancel) directly.
exec bash "$TASK_DIR/job.sbatch"

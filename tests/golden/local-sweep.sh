#!/bin/bash
#
# ddp-check sweep on site 'local': 3 task(s), 2 at a time, each 1 node(s) x 1 rank(s); rendered by hpctrain 0.1.0.
# Every task is a whole job in tasks/<i>/job.sh, with its own config, seed and logs.
# Rerun the sweep with  bash /runs/ddp-check/RUN_ID/job.sh ; one task alone with  bash /runs/ddp-check/RUN_ID/tasks/<i>/job.sh
set -euo pipefail

RUN_DIR=/runs/ddp-check/RUN_ID
# No scheduler: run the tasks here, 2 at a time; each task's script records its
# exit status in tasks/<i>/status/exit_code; this one exits 1 if any task failed.
mkdir -p "$RUN_DIR/status"
echo $$ >"$RUN_DIR/status/pid"
trap 'echo $? >"$RUN_DIR/status/exit_code"' EXIT
N=3
K=2
running=0
for (( i = 0; i < N; i++ )); do
  if (( running >= K )); then
    wait -n || true
    running=$(( running - 1 ))
  fi
  mkdir -p "$RUN_DIR/tasks/$i/logs"
  bash "$RUN_DIR/tasks/$i/job.sh" >"$RUN_DIR/tasks/$i/logs/job.out" 2>&1 &
  running=$(( running + 1 ))
done
wait
failed=0
for (( i = 0; i < N; i++ )); do
  [[ "$(cat "$RUN_DIR/tasks/$i/status/exit_code" 2>/dev/null)" == 0 ]] || failed=$(( failed + 1 ))
done
echo "hpctrain: $(( N - failed )) of $N task(s) succeeded" >&2
exit $(( failed > 0 ? 1 : 0 ))

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
# TERM, INT or HUP to this shell (a shutdown, a closed session, a `kill`) stops the sweep as one
# job: no further task starts, and each running task gets SIGTERM, which its own shell answers as
# a single job's does (its ranks save at the next iteration boundary; the task ends STOPPED). A
# task that never started is recorded as stopped before it started. This shell waits for them.
STOP_SIGNAL=""
TASKS=()
# shellcheck disable=SC2317,SC2329  # called by the traps below (SC2329: shellcheck >= 0.10)
on_stop() {  # SIG
  [[ -z $STOP_SIGNAL ]] || return 0
  STOP_SIGNAL=$1
  echo "hpctrain: SIG$1: passed to the running task(s) as SIGTERM; no further task starts" >&2
  kill -TERM "${TASKS[@]}" 2>/dev/null || true
}
trap 'on_stop TERM' TERM
trap 'on_stop INT' INT
trap 'on_stop HUP' HUP
running=0
for (( i = 0; i < N; i++ )); do
  while (( running >= K )) && [[ -z $STOP_SIGNAL ]]; do
    wait -n || true
    # (a trapped signal ends `wait -n` early, no task having ended; then none starts anyway)
    [[ -n $STOP_SIGNAL ]] || running=$(( running - 1 ))
  done
  [[ -z $STOP_SIGNAL ]] || break
  mkdir -p "$RUN_DIR/tasks/$i/logs"
  bash "$RUN_DIR/tasks/$i/job.sh" >"$RUN_DIR/tasks/$i/logs/job.out" 2>&1 &
  TASKS+=("$!")
  running=$(( running + 1 ))
done
# Until every started task has ended (a trapped signal ends `wait` early).
while [[ -n $(jobs -pr) ]]; do
  wait || true
done
if [[ -n $STOP_SIGNAL ]]; then
  for (( ; i < N; i++ )); do
    mkdir -p "$RUN_DIR/tasks/$i/status"
    printf '{"signal": "%s", "step": null, "saved": null, "message": "(SIG%s) before it started: the sweep was stopped"}\n' \
      "$STOP_SIGNAL" "$STOP_SIGNAL" >"$RUN_DIR/tasks/$i/status/stopped.json"
    echo $(( 128 + $(kill -l "$STOP_SIGNAL") )) >"$RUN_DIR/tasks/$i/status/exit_code"
  done
  echo "hpctrain: the sweep was stopped (SIG$STOP_SIGNAL)" >&2
  exit $(( 128 + $(kill -l "$STOP_SIGNAL") ))
fi
failed=0
for (( i = 0; i < N; i++ )); do
  [[ "$(cat "$RUN_DIR/tasks/$i/status/exit_code" 2>/dev/null)" == 0 ]] || failed=$(( failed + 1 ))
done
echo "hpctrain: $(( N - failed )) of $N task(s) succeeded" >&2
exit $(( failed > 0 ? 1 : 0 ))

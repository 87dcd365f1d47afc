#!/bin/bash
#
# ddp-check sweep on site 'locallab': 2 task(s), 2 at a time, each 2 host(s) x 1 rank(s); rendered by hpctrain 0.1.0.
# Every task is a whole job in tasks/<i>/job.sh (a batch shell that starts its steps over ssh), with its own
# config, seed, logs and port. This script runs the tasks on the first host, detached (mode start).
# Start the sweep again by hand with  ssh HEAD bash /runs/ddp-check/RUN_ID/job.sh start </dev/null ; one task alone with  ssh HEAD bash /runs/ddp-check/RUN_ID/tasks/<i>/job.sh start </dev/null
set -euo pipefail

RUN_DIR=/runs/ddp-check/RUN_ID
mkdir -p "$RUN_DIR/logs" "$RUN_DIR/status"

# --- control (ssh) --------------------------------------------------------------------------
# Secrets arrive on standard input as NAME\0VALUE\0 pairs: never on a command line (which `ps`
# shows) and never on disk.
read_secrets() {
  local name value
  while IFS= read -r -d '' name && IFS= read -r -d '' value; do
    [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] && export "$name=$value"
  done
  return 0
}


# The fields of /proc/PID/stat after the process's name, into the caller's FIELDS: read whole
# with bash's own read (no command: a stop looks ten times a second at every process of the run),
# as a name may hold ") " or a newline and the fields follow its last ") ". Status 1: PID is gone.
stat_fields() {  # PID
  local stat=
  { IFS= read -r -d '' stat <"/proc/$1/stat" || true; } 2>/dev/null  # (read: status 1 at the end)
  [[ -n $stat ]] || return 1
  read -r -a FIELDS <<<"${stat##*) }"
}

# Every process of this run on this host, one "PID KIND" a line (KIND batch: a batch shell;
# agent: torchrun, started through the rank side; rank: a rank):
# what a step started (HPCTRAIN_STEP_OF in its environment: setup lines, torchrun, the ranks and
# whatever they start), bash running this run's script (the batch shell, a step's shell; not
# another stop), the rank side, and ssh clients carrying a step of it. Not those of this
# process's own session (this stop, what runs it), nor of another network namespace (where
# machines share one process table, as the test cluster's do, a stop keeps to its own). The
# patterns are regular expressions, so that the grep reading the process table never finds itself.
run_processes() {
  local re dirs=("$RUN_DIR") d pid why comm session FIELDS=() args=() i kind
  for d in "$RUN_DIR"/tasks/*/; do
    [[ -d $d ]] && dirs+=("${d%/}")
  done
  re=$(printf '%s\n' "${dirs[@]}" | sed 's/[][\.*^$+?(){}|]/\\&/g' | paste -sd '|' -)
  stat_fields $$
  session=${FIELDS[3]}
  # Most telling first: a process found twice keeps its first reason (sort -s -u), so a rank or
  # torchrun, which also carries the step's environment, is known as one.
  {
    grep -lzE -e "^($re)/rank\$" /proc/[0-9]*/cmdline 2>/dev/null | sed 's|^/proc/\([0-9]*\)/.*|\1 rank|' || true
    grep -lzE -e "^($re)/job\.sh\$" /proc/[0-9]*/cmdline 2>/dev/null | sed 's|^/proc/\([0-9]*\)/.*|\1 sh|' || true
    grep -lzE -e "'($re)/job\.sh' 'step'" /proc/[0-9]*/cmdline 2>/dev/null | sed 's|^/proc/\([0-9]*\)/.*|\1 ssh|' || true
    grep -lzE -e "^HPCTRAIN_STEP_OF=($re)\$" /proc/[0-9]*/environ 2>/dev/null | sed 's|^/proc/\([0-9]*\)/.*|\1 env|' || true
  } | sort -s -u -k1,1n | while read -r pid why; do
    stat_fields "$pid" || continue
    [[ ${FIELDS[0]:-Z} != Z && ${FIELDS[3]:-} != "$session" ]] || continue
    # (-ef, not a command: the same namespace, as the links' targets are the namespaces' inodes)
    [[ /proc/$pid/ns/net -ef /proc/$$/ns/net ]] || continue
    { read -r comm <"/proc/$pid/comm"; } 2>/dev/null || continue
    kind="other"
    case $why in
      sh)
        [[ $comm == bash ]] || continue  # not a pager or an editor showing the script
        mapfile -d '' -t args <"/proc/$pid/cmdline" 2>/dev/null || continue
        for (( i = 0; i < ${#args[@]}; i++ )); do
          if [[ ${args[i]} == */job.sh ]]; then
            case ${args[i + 1]:-} in
              stop) continue 2 ;;
              "") kind="batch" ;;
              *) ;;
            esac
            break
          fi
        done
        ;;
      ssh) [[ $comm == ssh ]] || continue ;;
      rank)
        mapfile -d '' -t args <"/proc/$pid/cmdline" 2>/dev/null || continue
        for (( i = 0; i < ${#args[@]}; i++ )); do
          if [[ ${args[i]} =~ ^($re)/rank$ ]]; then
            case ${args[i + 1]:-} in
              agent | launch) kind="agent" ;;
              run) kind="rank" ;;
              *) ;;
            esac
            break
          fi
        done
        ;;
      *) ;;
    esac
    echo "$pid $kind"
  done
}

# Stops every process of this run on this host: SIGTERM to the batch shell first (so that it
# ends as cancelled, not as a job whose ranks failed), then to the rest (torchrun stops its
# ranks, a rank's program may save), then SIGKILL what is left after GRACE seconds.
stop_run() {  # [GRACE]
  local grace=${1:-10} found=() batch=() pids=() i n line
  mapfile -t found < <(run_processes)
  for line in "${found[@]}"; do
    if [[ $line == *" batch" ]]; then
      batch+=("${line%% *}")
    fi
  done
  if (( ${#batch[@]} )); then
    kill -TERM "${batch[@]}" 2>/dev/null || true
    for (( i = 0; i < 20; i++ )); do
      kill -0 "${batch[@]}" 2>/dev/null || break
      sleep 0.1
    done
  fi
  n=${#found[@]}
  if (( n == 0 )); then
    echo "hpctrain stop: $(hostname): nothing of this run runs here"
    return 0
  fi
  for (( i = 0; i <= grace * 10; i++ )); do
    mapfile -t found < <(run_processes)
    pids=("${found[@]%% *}")
    (( ${#pids[@]} )) || break
    if (( i == 0 )); then
      kill -TERM "${pids[@]}" 2>/dev/null || true
    elif (( i == grace * 10 )); then
      kill -KILL "${pids[@]}" 2>/dev/null || true
      echo "hpctrain stop: $(hostname): ${#pids[@]} process(es) still ran after ${grace} s: killed"
    fi
    sleep 0.1
  done
  echo "hpctrain stop: $(hostname): stopped $n process(es)"
}

# Starts the batch shell detached (its own session: a closing terminal or ssh session does not
# reach it), its output appended to logs/job.out; prints its pid and start time, which tell it
# from a later process that gets the same pid.
detach() {
  rm -f "$RUN_DIR/status/pid" "$RUN_DIR/status/exit_code"
  setsid bash "$RUN_DIR/job.sh" </dev/null >>"$RUN_DIR/logs/job.out" 2>&1 &
  local pid=$! FIELDS=()
  stat_fields "$pid" || true
  echo "hpctrain start: pid=$pid start=${FIELDS[19]:-}"
}

# bash job.sh start: (hpctrain submit, over ssh on the head) the secrets on stdin, this script
# detached; bash job.sh stop [GRACE]: every process of every task on this host.
case ${1:-} in
  start)
    read_secrets
    detach
    exit 0
    ;;
  stop)
    stop_run "${@:2}"
    exit 0
    ;;
  "") ;;
  *)
    echo "hpctrain: unknown mode '$1': start or stop" >&2
    exit 2
    ;;
esac

# The tasks, 2 at a time; each task's batch shell records its exit status in
# tasks/<i>/status/exit_code; this one exits 1 if any task failed.
echo $$ >"$RUN_DIR/status/pid"
trap 'exit 143' TERM INT HUP
trap 'echo $? >"$RUN_DIR/status/exit_code"' EXIT
N=2
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

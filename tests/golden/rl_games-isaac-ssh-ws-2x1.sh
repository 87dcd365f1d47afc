#!/bin/bash
#
# ddp-check on site 'ws-lab': 2 node(s) x 1 rank(s), rendered by hpctrain 0.1.0.
# Each rank runs: '/opt/Isaac Lab/scripts/reinforcement_learning/rl_games/train.py' --task=Isaac-Cartpole-v0 --headless --distributed
# This file is the whole job: start it by hand with  ssh ws1 bash /runs/ddp-check/RUN_ID/job.sh start </dev/null
# shellcheck disable=SC1091  # setup lines source files that exist only on the cluster
set -euo pipefail

RUN_DIR=/runs/ddp-check/RUN_ID
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

# --- hosts (ssh) ----------------------------------------------------------------------------
# The job's hosts: the site's first 2. The batch shell runs on
# the first (BATCH_HOST). HOSTS: the attempt's, the first of them the head.
NNODES=2
ALL_HOSTS=(ws1 ws2)
BATCH_HOST=${ALL_HOSTS[0]}
HOSTS=("${ALL_HOSTS[@]:0:NNODES}")
NODELIST=$(printf '%s\n' "${HOSTS[@]}")
FIRST=${HOSTS[0]}
# This run's own ssh connection to each host, which all of its steps share (ControlMaster). The
# socket directory is short (a socket path holds at most 107 bytes) and this user's alone.
RUN_TAG=$(printf '%s' "$RUN_DIR" | cksum | cut -d ' ' -f 1)
CONTROL_DIR=/tmp/hpctrain-ssh-$(id -u)
SSH=(ssh -o Compression=yes -o BatchMode=yes -o ConnectTimeout=7 -o LogLevel=ERROR -o ServerAliveInterval=15 -o ServerAliveCountMax=4 -o StrictHostKeyChecking=accept-new -o 'IdentityFile=~/.ssh/id_lab' -o IdentitiesOnly=yes -p 2222 -l me -o ControlMaster=auto -o "ControlPath=$CONTROL_DIR/$RUN_TAG-%C" -o ControlPersist=60)
# ssh with this run's connection, started from /: the first one becomes the connection's master,
# which outlives the run by ControlPersist and must not hold the run's directory (a cancelled
# run's disk could not be unmounted for that minute).
ssh_to() {
  (cd / && exec "${SSH[@]}" "$@")
}

control_dir() {
  mkdir -m 700 "$CONTROL_DIR" 2>/dev/null || true
  [[ -O $CONTROL_DIR && ! -L $CONTROL_DIR ]] || die "$CONTROL_DIR is not a directory of yours: another user could take over this run's ssh connections through it; remove it"
}

# A command line for the far side's login shell: every word single-quoted, which bash, zsh,
# dash, fish and tcsh all read the same.
quoted() {
  local word out=()
  for word in "$@"; do
    out+=("'${word//\'/\'\\\'\'}'")
  done
  printf '%s' "${out[*]}"
}

# The same for rsync's -e, which reads single quotes itself: a quote inside one is doubled.
rsync_quoted() {
  local word out=()
  for word in "$@"; do
    out+=("'${word//\'/\'\'}'")
  done
  printf '%s' "${out[*]}"
}

# The secrets, for a step on another host: NAME\0VALUE\0 on its standard input.
secrets() {
  return 0
}

# Stops the run's processes on every host but this shell's own: the other hosts' first, over
# ssh, then this host's (which would end those ssh sessions). It waits for its own stops only:
# a bare `wait` would also wait for the steps still running, the head's among them, which only
# the head's stop below ends.
stop_hosts() {  # [GRACE]: seconds from SIGTERM to SIGKILL (job.sh stop)
  local i stops=() within=(${1:+"$1"})
  for (( i = 0; i < NNODES; i++ )); do
    [[ ${HOSTS[i]} != "$BATCH_HOST" ]] || continue
    ssh_to -- "${HOSTS[i]}" "$(quoted bash "$RUN_DIR/job.sh" stop "${within[@]}")" </dev/null 2>&1 | sed 's/^/  /' &
    stops+=("$!")
  done
  if [[ -n ${stops[*]:-} ]]; then
    wait "${stops[@]}" || true
  fi
  bash "$RUN_DIR/job.sh" stop "${within[@]}" 2>&1 | sed 's/^/  /'
}
# Whether no rank of this run runs on the hosts given (indices into HOSTS) any more.
ranks_ended() {
  local i n
  for i in "$@"; do
    if [[ ${HOSTS[i]} == "$BATCH_HOST" ]]; then
      n=$(bash "$RUN_DIR/job.sh" ranks 2>/dev/null) || return 1
    else
      n=$(ssh_to -- "${HOSTS[i]}" "$(quoted bash "$RUN_DIR/job.sh" ranks)" </dev/null 2>/dev/null) || return 1
    fi
    [[ $n == 0 ]] || return 1
  done
}
# "Save now" on every host (`job.sh term`): SIGTERM to the run's torchrun there, which passes it
# on to its ranks. All at once; this shell waits for the ssh commands only.
term_hosts() {
  local i terms=()
  for (( i = 0; i < NNODES; i++ )); do
    [[ ${HOSTS[i]} != "$BATCH_HOST" ]] || continue
    ssh_to -- "${HOSTS[i]}" "$(quoted bash "$RUN_DIR/job.sh" term)" </dev/null 2>&1 | sed 's/^/  /' &
    terms+=("$!")
  done
  bash "$RUN_DIR/job.sh" term 2>&1 | sed 's/^/  /'
  if [[ -n ${terms[*]:-} ]]; then
    wait "${terms[@]}" || true
  fi
}
# sync: rsync: every host wrote its ranks' logs, notes and results into its own copy of the run
# directory: bring them here (-u: a file newer here is kept), so that this host holds the whole run.
gather() {
  local i copies=()
  for (( i = 0; i < NNODES; i++ )); do
    [[ ${HOSTS[i]} != "$BATCH_HOST" ]] || continue
    # (from /, as ssh_to: an ssh that rsync starts may become the connection's master)
    (cd / && exec rsync -a -s -u -e "$(rsync_quoted "${SSH[@]}")" --exclude=/job.sh --exclude=/rank/ \
      --exclude=/bootstrap.json --exclude=/job.yaml --exclude=/run.json \
      "${HOSTS[i]}:$RUN_DIR/" "$RUN_DIR/") 2>&1 | sed 's/^/  /' &
    copies+=("$!")
  done
  if [[ -n ${copies[*]:-} ]]; then
    wait "${copies[@]}" || true
  fi
}

# One step on every host, as srun runs one task per node: the batch shell's host's part here, the
# others' over ssh. Each gets what srun would give it: the job's HPCTRAIN_* variables,
# SLURMD_NODENAME (the host as the site names it; the rank side's name for its node) and, with
# --nodeid, SLURM_NODEID (the preflight's head is node 0). The first step that fails stops the
# others (srun's --kill-on-bad-exit); its status is returned. A step that ended on a signal
# (torchrun was sent TERM, INT or HUP there: its ranks are saving) is a stop, not a failure: SIGTERM
# goes on to the other hosts' torchrun, as the batch shell's own stop does, and the others end as
# they save. --gather: then bring the hosts' files here.
on_hosts() {
  local nodeid=0 gather=0 i host status=0 var vars=() step pids=() ended=() left stopped=0
  local stop_since=0 ended_all=0 asked=0 quiet=0 left_hosts=()
  if [[ $BASHPID != "$$" ]]; then
    # (the launch, in the background: a signal to the batch shell's process group is the batch
    # shell's to answer, which tells the hosts itself; this one goes on watching the steps)
    trap 'stopped=143' TERM INT HUP
  fi
  while [[ ${1:-} == --nodeid || ${1:-} == --gather ]]; do
    if [[ $1 == --nodeid ]]; then nodeid=1; else gather=1; fi
    shift
  done
  for var in $(compgen -e); do
    if [[ $var == HPCTRAIN_* ]]; then
      vars+=("$var=${!var}")
    fi
  done
  for (( i = 0; i < NNODES; i++ )); do
    host=${HOSTS[i]}
    step=(bash "$RUN_DIR/job.sh" step "${vars[@]}" "SLURMD_NODENAME=$host" "HPCTRAIN_NODE_INDEX=$i")
    if (( nodeid )); then
      step+=("SLURM_NODEID=$i")
    fi
    step+=(-- "$@")
    if [[ $host == "$BATCH_HOST" ]]; then
      setsid "${step[@]}" </dev/null &
    else
      ssh_to -- "$host" "$(quoted "${step[@]}")" < <(secrets) &
    fi
    pids+=("$!")
    ended+=("")
  done
  left=$NNODES
  while (( left > 0 )); do
    sleep 0.5
    # Stopping, and a host has not ended a minute on (its ranks may wait in a collective for a
    # peer that is gone, and never reach the iteration boundary where they save): end it.
    if (( stopped && ! ended_all )); then
      (( stop_since )) || stop_since=$SECONDS
      if (( SECONDS - stop_since > 60 )); then
        log "the hosts did not end within 60 s of the stop: ending what is left"
        stop_hosts
        ended_all=1
      elif (( SECONDS - asked >= 5 )); then
        # Every rank has saved and ended, twice in a row, yet a host's step runs on: its
        # torchrun waits in its exit barrier for a host whose torchrun ended on the signal
        # (torch's barrier waits 5 minutes). Nothing is left to save there.
        asked=$SECONDS
        left_hosts=()
        for (( i = 0; i < NNODES; i++ )); do
          [[ -n ${ended[i]} ]] || left_hosts+=("$i")
        done
        if ranks_ended "${left_hosts[@]}"; then
          quiet=$(( quiet + 1 ))
        else
          quiet=0
        fi
        if (( quiet >= 2 )); then
          log "the ranks have ended on every host: ending the torchrun still waiting for a host that stopped first"
          stop_hosts 2  # (in a store wait, torchrun reads no signal: its end is SIGKILL)
          ended_all=1
        fi
      fi
    fi
    for (( i = 0; i < NNODES; i++ )); do
      [[ -z ${ended[i]} ]] || continue
      ! kill -0 "${pids[i]}" 2>/dev/null || continue
      ended[i]=0
      # (stderr: bash's own "Killed" line for a step that a stop ended is not the job's output)
      wait "${pids[i]}" 2>/dev/null || ended[i]=$?
      left=$(( left - 1 ))
      if (( status == 0 && (ended[i] == 143 || ended[i] == 129 || ended[i] == 130 || ended[i] == 131) )); then
        if (( ! stopped )); then
          log "${HOSTS[i]}: torchrun ended on a signal (status ${ended[i]}): passing SIGTERM on to every host"
          term_hosts
        fi
        stopped=${ended[i]}
      elif (( ended[i] != 0 && status == 0 && stopped )); then
        :  # the run is stopping (a signal, a cancel): a host's step cut short is part of that
      elif (( ended[i] != 0 && status == 0 )); then
        status=${ended[i]}
        if (( status == 255 )) && [[ ${HOSTS[i]} != "$BATCH_HOST" ]]; then
          log "${HOSTS[i]}: ssh failed or lost the connection (status 255): stopping the other hosts"
        else
          log "${HOSTS[i]}: its step ended with status $status: stopping the other hosts"
        fi
        printf '%s %s\n' "${HOSTS[i]}" "$status" >"$RUN_DIR/status/first-failed-host"
        stop_hosts
      fi
    done
  done
  if (( gather )); then
    gather
  fi
  (( status != 0 )) || status=$stopped
  return "$status"
}

# --- the rendezvous port (ssh) --------------------------------------------------------------
# No scheduler hands out job ids here. Each run's batch shell holds a lock on its port on the head
# for as long as it runs (flock: released however the shell ends), so that no two hpctrain runs
# on this host take the same port. The job's id, which the port derives from, starts at a number
# drawn from the run directory and moves on past ports another run holds or a program listens on.
PORT_LOCKS=/tmp/hpctrain-ports

port_lock() {  # PORT
  echo "$PORT_LOCKS/$(hostname)-$1.lock"
}

listening() {  # PORT: whether a socket of this host listens on it (IPv4 or IPv6)
  local hex files=() f
  hex=$(printf '%04X' "$1")
  for f in /proc/net/tcp /proc/net/tcp6; do
    if [[ -r $f ]]; then
      files+=("$f")
    fi
  done
  awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p {found = 1} END {exit !found}' "${files[@]}"
}

# Nothing (status 0) when PORT and the one after it (the spare port) are free on this host, else
# who holds them (status 1).
port_taken() {  # PORT
  local lock port
  lock=$(port_lock "$1")
  if [[ -e $lock ]] && ! flock -n "$lock" true 2>/dev/null; then
    echo "port $1 is held by another hpctrain run: $(head -c 300 "$lock" 2>/dev/null | head -n 1)"
    return 1
  fi
  for port in "$1" "$(( $1 + 1 ))"; do
    if listening "$port"; then
      echo "port $port is in use by a program that is not an hpctrain run"
      return 1
    fi
  done
}

# Takes PORT's lock for the rest of this shell's life (fd 9, which what it starts inherits).
hold_port() {  # PORT
  local lock
  lock=$(port_lock "$1")
  { exec 9>>"$lock"; } 2>/dev/null || { exec 9<"$lock"; } 2>/dev/null || return 1
  if ! flock -n 9; then
    exec 9>&-
    return 1
  fi
  printf '%s (batch shell pid %s since %s)\n' "$RUN_DIR" "$$" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$lock" 2>/dev/null || true
}

claim_port() {
  mkdir -p "$PORT_LOCKS"
  chmod 1777 "$PORT_LOCKS" 2>/dev/null || true
  local n port
  for (( n = 0; n < 2268; n++ )); do
    port=$(( 61000 + 2 * ((RUN_TAG + n) % 2268) ))
    if port_taken "$port" >/dev/null && hold_port "$port"; then
      HPCTRAIN_JOB_ID=$(( RUN_TAG + n ))
      return 0
    fi
  done
  die "no free rendezvous port on $(hostname): all 2268 of the site's port rule are taken"
}

# --- control (ssh) --------------------------------------------------------------------------
# Secrets arrive on standard input as NAME\0VALUE\0 pairs: never on a command line (which `ps`
# shows) and never on disk.
read_secrets() {
  # (this job has none)
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

# --- modes (ssh) ----------------------------------------------------------------------------
#   bash job.sh              the batch shell, on the head: the preflight, then one step per host
#   bash job.sh start        (hpctrain submit, over ssh on the head) takes the secrets on stdin,
#                            opens this run's ssh connection to every other host, and starts the
#                            batch shell detached
#   bash job.sh step VAR=VALUE... -- COMMAND...
#                            one host's part of a step: the environment below, then COMMAND
#   bash job.sh probe [head] (hpctrain submit, on every host first) can this host run its part?
#   bash job.sh stop [GRACE] every process of this run on this host: TERM, KILL after GRACE (10) s
#   bash job.sh term         SIGTERM to this run's torchrun on this host ("save now", the batch
#                            shell's stop on every host)
#   bash job.sh ranks        how many of this run's ranks run on this host (a stop's watcher)
MODE=${1:-}

start_batch_shell() {
  read_secrets
  control_dir
  # Opened now, so that a host the head cannot reach is named to hpctrain submit before anything
  # starts; the batch shell's steps ride on these connections.
  local host pid pids=() failed=0
  for host in "${ALL_HOSTS[@]:1}"; do
    (
      said=$(ssh_to -- "$host" true 2>&1 </dev/null) ||
        { echo "hpctrain start: unreachable: $host: $(paste -sd ' ' - <<<"$said")"; exit 1; }
    ) &
    pids+=("$!")
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || failed=1
  done
  if (( failed )); then
    exit 3
  fi
  detach
}


# This run's torchruns and ranks on this host, from one look at the process table (run_processes):
# their pids into the caller's AGENTS and RANKS.
run_kinds() {
  local line
  AGENTS=() RANKS=()
  while read -r line; do
    case ${line#* } in
      agent) AGENTS+=("${line%% *}") ;;
      rank) RANKS+=("${line%% *}") ;;
      *) ;;
    esac
  done < <(run_processes)
}

# "Save now" on this host (the batch shell's stop, on every host): SIGTERM to this run's torchrun,
# which passes it on to its ranks; with no torchrun (the tasks launch), to the ranks themselves.
term_run() {
  local AGENTS RANKS
  run_kinds
  if (( ${#AGENTS[@]} && ${#RANKS[@]} )); then
    kill -TERM "${AGENTS[@]}" 2>/dev/null || true
    echo "hpctrain term: $(hostname): SIGTERM to torchrun (pid ${AGENTS[*]})"
  elif (( ${#AGENTS[@]} )); then
    # Its ranks have ended: torchrun is on its way out (its exit barrier), with nothing left to
    # stop (a signal there is only noted: rank/end/ending.py run_agent).
    echo "hpctrain term: $(hostname): the ranks have ended; torchrun is finishing"
  elif (( ${#RANKS[@]} )); then
    kill -TERM "${RANKS[@]}" 2>/dev/null || true
    echo "hpctrain term: $(hostname): SIGTERM to ${#RANKS[@]} rank(s)"
  else
    echo "hpctrain term: $(hostname): no torchrun of this run runs here"
  fi
}

# A torchrun whose ranks have all ended waits only in its exit barrier, for the other hosts'.
count_ranks() {
  local AGENTS RANKS
  run_kinds
  echo "${#RANKS[@]}"
}

probe_fail() {  # WHAT FIX
  echo "hpctrain probe: error: $1"
  echo "hpctrain probe: fix: $2"
  exit 3
}

# What this host needs for its part of the job, checked before anything starts: the working
# directory, the interpreter (after the environment's modules and setup lines), the program, the
# tools the scripts use; on the head, a fixed rendezvous port that is free.
probe_host() {  # [head]
  local py=(python) tool version
  command -v "${py[0]}" >/dev/null 2>&1 ||
    probe_fail "the interpreter '${py[0]}' (the job's python:) is not there" "install it there, or give the job's python: as the hosts have it (the site's modules and setup lines run first)"
  version=$("${py[@]}" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>&1) ||
    probe_fail "the interpreter '${py[*]}' (the job's python:) does not run: $(tail -n 3 <<<"$version" | paste -sd ' ' -)" "run it by hand there to see why"
  # (a variable: a quoted value inside the message's double quotes would be expanded there)
  local program='/opt/Isaac Lab/scripts/reinforcement_learning/rl_games/train.py'
  [[ -e $program ]] ||
    probe_fail "the program $program is not there (in $PWD)" "set the site's sync.code: true to copy the working directory to the hosts"
  for tool in flock setsid awk getent cksum grep sed rsync; do
    command -v "$tool" >/dev/null 2>&1 || probe_fail "'$tool' is not installed" "install it (util-linux, coreutils, glibc's getent, rsync)"
  done
  echo "hpctrain probe: ok host=$(hostname) python=$(tail -n 1 <<<"$version")"
}

# VAR=VALUE... -- COMMAND...: what srun gives a task, then the command (this host's part).
run_step() {
  while (( $# )) && [[ $1 != -- ]]; do
    [[ $1 =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "step: '$1' is not a VAR=VALUE"
    export "${1?}"
    shift
  done
  shift
  exec "$@"
}

# A rank killed by a signal (SIGKILL, the OOM killer) leaves no note of its own
# (status/rank-R.failed.json), and the notes of the ranks that lost it only say that. torchrun
# reports it though, in this job's output: of the host whose step failed first (the others were
# stopped because of it), the rank it saw killed. Else, when no rank left a note, that host.
failure_cause() {
  local first=() rank message node
  [[ -r "$RUN_DIR/status/first-failed-host" ]] || return 0
  read -r -a first <"$RUN_DIR/status/first-failed-host"
  if [[ -r "$RUN_DIR/logs/job.out" ]]; then
    # torchrun's failure summaries: RANK MESSAGE, for ranks that a signal ended, from its "Root
    # Cause" and its other "Failures" alike (a peer that lost the killed rank may end first and
    # be torchrun's root cause; the SIGTERM it then sends the rest is no cause). A rank killed
    # on the host that failed first; else any killed rank: the host whose peers lost it can end
    # its step first (their errors come as soon as the connection closes), and the killed rank
    # is the cause all the same.
    local killed=""
    while read -r rank message; do
      # A rank that left its own note ended of it (a lost peer, then an abort at exit): not the
      # silent death this looks for.
      [[ ! -e "$RUN_DIR/status/rank-$rank.failed.json" ]] || continue
      node=$(grep -o '"node": *"[^"]*"' "$RUN_DIR/status/rank-$rank.json" 2>/dev/null | sed 's/.*"\([^"]*\)"$/\1/') || node=
      if [[ $node == "${first[0]:-}" ]]; then
        echo "rank $rank on $node was killed: $message (torchrun's report; the ranks that lost it failed after it)"
        return 0
      fi
      [[ -n $killed ]] || killed="rank $rank on ${node:-?} was killed: $message (torchrun's report; the ranks that lost it failed after it)"
    done < <(tail -n 5000 "$RUN_DIR/logs/job.out" | awk '
      /^Failures:$/ {summary = 1; other = 1; next}
      /^Root Cause \(first observed failure\):$/ {summary = 1; other = 0; next}
      /^=+$/ {summary = 0; block = 0; next}
      summary && /^\[[0-9]+\]:$/ {block = 1; next}
      block && /^  rank *:/ {r = $0; sub(/^  rank *: */, "", r); sub(/ .*/, "", r)}
      block && /^  exitcode *:/ {c = $0; sub(/^  exitcode *: */, "", c); sub(/ .*/, "", c)}
      block && /^  traceback *:/ {
        m = $0; sub(/^  traceback *: */, "", m); block = 0
        # (among the others, SIGTERM is torchrun stopping the rest of its group)
        if (c ~ /^-[0-9]+$/ && !(other && c == "-15")) print r, m
      }')
    if [[ -n $killed ]]; then
      echo "$killed"
      return 0
    fi
  fi
  if ! compgen -G "$RUN_DIR/status/rank-*.failed.json" >/dev/null; then
    if [[ ${first[1]:-} == 255 ]]; then
      echo "ssh to ${first[0]:-?} failed or lost the connection (status 255), and no rank recorded an error: see logs/job.out"
    else
      echo "the step on ${first[0]:-?} failed first (status ${first[1]:-?}), and no rank recorded an error: see logs/job.out"
    fi
  fi
}

# The batch shell's end: its exit status for `hpctrain status`, a failed launch's cause named,
# and this run's connections closed.
on_exit() {
  local status=$? host cause
  # (A failed node check named its cause already: no rank ran.)
  if (( status != 0 && ${STATUS:-0} != 0 )) && ! compgen -G "$RUN_DIR/status/preflight-failed-*.txt" >/dev/null; then
    cause=$(failure_cause) || cause=
    if [[ -n $cause ]]; then
      record_failure ranks "$STATUS" "$cause"
    fi
  fi
  # Last: `hpctrain status` takes the run as ended once this exists, and reads its cause then.
  echo "$status" >"$RUN_DIR/status/exit_code"
  for host in "${ALL_HOSTS[@]:1}"; do
    ssh_to -O exit -- "$host" >/dev/null 2>&1 || true
  done
}

case $MODE in
  start)
    start_batch_shell
    exit 0
    ;;
  stop)
    stop_run "${@:2}"
    exit 0
    ;;
  term)
    term_run
    exit 0
    ;;
  ranks)
    count_ranks
    exit 0
    ;;
  step | probe)
    export HPCTRAIN_STEP_OF=$RUN_DIR  # how `stop` finds whatever this step starts
    read_secrets
    if [[ $MODE == probe ]]; then
      workdir=/runs/ddp-check/RUN_ID/code
      [[ -d $workdir ]] ||
        probe_fail "the working directory $workdir (where the job was submitted) is not there" "set the site's sync.code: true to copy it to the hosts"
    fi
    ;;
  "")
    echo $$ >"$RUN_DIR/status/pid"
    trap on_exit EXIT  # (TERM, INT and HUP: parts/stop.sh.j2, below)
    ;;
  *) die "unknown mode '$MODE': start, step, probe, stop, term or ranks (see above)" ;;
esac

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
# Module systems and activation scripts are not written for strict mode: Lmod's shell code, the
# `execute` lines of modulefiles and conda's or a venv's scripts read unset variables (which ends
# a `set -u` shell even inside `||`) and run commands that fail on purpose. So they run with
# `set +u` and without pipefail, each as one command whose status alone counts (errexit does not
# fire inside it); strict mode is restored after them. A failing module or line stops the job.
setup_failed() {  # WORDS...; called as `COMMAND || setup_failed ...`
  # shellcheck disable=SC2320  # $? is COMMAND's status (a setup line may end with an echo)
  local status=$?
  record_failure setup "$status" "$* (status $status)" 2>/dev/null  # status/failure.json; said once, below
  die "$* (status $status)"
}
# (Saved from $- and [[ -o ]], not $(set +o): a command substitution reports errexit off.)
SETUP_FLAGS=$-
if [[ -o pipefail ]]; then SETUP_PIPEFAIL=-o; else SETUP_PIPEFAIL=+o; fi
set +u +o pipefail
# shellcheck source=/dev/null
{
source /opt/venv/bin/activate
} || setup_failed "setup line 1 failed:" 'source /opt/venv/bin/activate'
set "$SETUP_PIPEFAIL" pipefail
[[ "$SETUP_FLAGS" != *u* ]] || set -u
# The program runs from the copy of the code taken at submit (hpctrain/runs/snapshot.py), so that
# edits made since — before a requeue, say — do not change what this run trains.
cd /runs/ddp-check/RUN_ID/code
export WANDB_RUN_ID=run_id
export WANDB_RESUME=allow
export WANDB_DIR=/runs/ddp-check/RUN_ID
export HPCTRAIN_TENSORBOARD_DIR=/runs/ddp-check/RUN_ID/tensorboard
export HPCTRAIN_RUN_DIR=/runs/ddp-check/RUN_ID
export HPCTRAIN_JOB_NAME=ddp-check
export HPCTRAIN_SITE=ws-lab
export HPCTRAIN_LIBRARY=rl_games

case $MODE in
  step) run_step "${@:2}" ;;
  probe)
    probe_host "${@:2}"
    exit 0
    ;;
  *) ;;
esac

# --- the batch shell (on the head, ws1) ----------------------------------------------
pass_stop() {  # SIG
  log "SIG$1: passed to torchrun on every host as SIGTERM; the ranks save at the next iteration boundary"
  kill -TERM "$CHILD" 2>/dev/null || true  # the steps' watcher (on_hosts): the hosts are told here
  term_hosts
}
# What outlived the launch on any host (a killed torchrun's ranks): after a stop or a failure.
end_ranks() {
  if [[ -n $STOP_SIGNAL ]] || (( STATUS != 0 )); then
    stop_hosts
  fi
}

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
claim_port
export HPCTRAIN_JOB_ID
control_dir
THIS_NODE=$FIRST  # `job.sh start` runs this shell on the head

# --- rendezvous -----------------------------------------------------------------------------
# This shell runs on the first node, so its own interface address is the head's.
[[ "$THIS_NODE" == "$FIRST" ]] || die "the batch shell runs on '$THIS_NODE', not on the head '$FIRST'"
IFACE=eth0
HEAD=$(ip -o -4 addr show dev "$IFACE" 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}') || true  # (no such interface: said below, not a silent exit)
[[ -n "$HEAD" ]] || die "the head '$FIRST' has no IPv4 address on interface '$IFACE' (site head.interface)"
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
LAUNCH=(on_hosts --gather python "$RUN_DIR/rank" launch 60 --nnodes="$NNODES" --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint="$HEAD:$PORT" --rdzv-id="$HPCTRAIN_JOB_ID" --rdzv-conf="join_timeout=600,last_call_timeout=30,close_timeout=60" --max-restarts=0
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
# A trapped signal ends `wait` early (on_stop forwards it): wait again until the launch ends.
while :; do
  STATUS=0
  wait "$CHILD" || STATUS=$?
  if (( STATUS <= 128 )) || ! kill -0 "$CHILD" 2>/dev/null; then
    break
  fi
done
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
  record_failure ranks "$STATUS"
  die "the ranks exited with status $STATUS; per-rank logs: $RUN_DIR/logs/rank-*.log"
fi
archive_failure
log "done: all ranks exited 0"

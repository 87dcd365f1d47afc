#!/usr/bin/env bash
# Stop or start the sshd of one machine of the local test cluster (nodeI or login).
#
# Usage (root):  tests/cluster/node-sshd.sh MACHINE stop|start|status [--quiet]
#
#   stop    the listening sshd exits (SIGTERM, by its pid file after checking /proc/PID/comm);
#           new connections to MACHINE then fail at once with "Connection refused". Sessions
#           already open (and ControlMaster connections) go on, as with `systemctl stop ssh`.
#   start   starts it again (nothing when it runs); it accepts connections when this returns.
#   status  exit 0 when it runs.
# Only machines that up.sh gave an sshd (tests/cluster/ssh-info.sh lists them) can be started.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "${here}/lib.sh"

die() {
    echo "node-sshd.sh: error: $*" >&2
    exit 1
}

[[ $# -ge 2 ]] || die "usage: node-sshd.sh MACHINE stop|start|status [--quiet]"
machine=$1
action=$2
quiet=0
if [[ ${3:-} == --quiet ]]; then quiet=1; fi
[[ ${EUID} -eq 0 ]] || die "must run as root"
[[ ${machine} =~ ^(node[1-9][0-9]*|login)$ ]] || die "MACHINE must be nodeI or login (got '${machine}')"
pidfile=${STATE_DIR}/run/sshd-${machine}.pid

say() {
    if ((!quiet)); then echo "node-sshd.sh: $*"; fi
}

case ${action} in
    status)
        if pid_alive "${pidfile}" sshd; then
            say "${machine}: sshd runs (pid $(<"${pidfile}"))"
            exit 0
        fi
        say "${machine}: no sshd"
        exit 1
        ;;
    stop)
        if ! pid_alive "${pidfile}" sshd; then
            say "${machine}: sshd was not running"
            exit 0
        fi
        pid=$(<"${pidfile}")
        kill -TERM "${pid}" 2>/dev/null || true
        for _ in $(seq 100); do
            running "${pid}" || break
            sleep 0.02
        done
        if running "${pid}"; then
            kill -KILL "${pid}" 2>/dev/null || true
        fi
        rm -f "${pidfile}"
        say "${machine}: sshd stopped"
        ;;
    start)
        if pid_alive "${pidfile}" sshd; then
            say "${machine}: sshd already runs"
            exit 0
        fi
        [[ -r ${SSH_DIR}/sshd_config-${machine} ]] || die "${machine} has no sshd (see tests/cluster/ssh-info.sh)"
        machine_up "${machine}" || die "${machine} is not up (tests/cluster/up.sh)"
        start_sshd "${machine}" || die "sshd for ${machine} did not start; see ${STATE_DIR}/log/sshd-${machine}.log"
        say "${machine}: sshd started (pid $(<"${pidfile}"))"
        ;;
    *) die "unknown action '${action}' (stop, start or status)" ;;
esac

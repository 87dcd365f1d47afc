#!/usr/bin/env bash
# Make one node of the local test cluster resolve its own name to the loopback address, as on a
# machine whose /etc/hosts carries Debian's "127.0.1.1 <hostname>" line, or undo it.
#
# Usage (root):  tests/cluster/node-hosts.sh NODE loopback|restore|status
#
#   loopback  inside NODE's namespaces only (its slurmd, job steps, ssh sessions, containers
#             started there), NODE's own name resolves to 127.0.1.1 instead of its IP; every
#             other node, login and the host still resolve it to its IP.
#   restore   NODE's /etc/hosts is the host's again.
#   status    prints "loopback" or "normal".
#
# Each node's /etc/hosts is bound from ${STATE_DIR}/hosts/NODE; this rewrites that file in
# place (a new inode would not be seen through the bind mount). Slurm keeps working (the
# controller and slurmd talk by IP). A cold restart of the cluster (up.sh) restores every node.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "${here}/lib.sh"

die() {
    echo "node-hosts.sh: error: $*" >&2
    exit 1
}

[[ $# -eq 2 ]] || die "usage: node-hosts.sh NODE loopback|restore|status"
node=$1
action=$2
[[ ${EUID} -eq 0 ]] || die "must run as root"
[[ ${node} =~ ^node([1-9][0-9]*)$ ]] || die "NODE must be nodeI (got '${node}')"
i=${BASH_REMATCH[1]}
if [[ ! -e ${HOSTS_DIR}/${node} ]] || ! machine_up "${node}"; then
    die "${node} is not up (tests/cluster/up.sh)"
fi

# One writer at a time (up.sh re-syncs these files too).
exec 9>"${STATE_DIR}/.lock"
flock -w 120 9 || die "another up.sh/down.sh holds ${STATE_DIR}/.lock"

case ${action} in
    loopback) : >"${HOSTS_DIR}/${node}.loopback" ;;
    restore) rm -f "${HOSTS_DIR}/${node}.loopback" ;;
    status)
        if [[ -e ${HOSTS_DIR}/${node}.loopback ]]; then echo loopback; else echo normal; fi
        exit 0
        ;;
    *) die "unknown action '${action}' (loopback, restore or status)" ;;
esac
sync_node_hosts "${i}"
if [[ ${action} == loopback ]]; then
    echo "node-hosts.sh: ${node} resolves ${node} to ${LOOPBACK_IP} inside ${node} (${HOSTS_DIR}/${node})"
else
    echo "node-hosts.sh: ${node} resolves ${node} to $(node_ip "${i}") again"
fi

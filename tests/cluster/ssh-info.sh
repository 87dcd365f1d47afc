#!/usr/bin/env bash
# Print, as shell-sourceable assignments, where the local test cluster's ssh material is:
#
#   eval "$(tests/cluster/ssh-info.sh)"
#   ssh -F "$HPCTRAIN_CLUSTER_SSH_CONFIG" node2 hostname
#
#   HPCTRAIN_CLUSTER_SSH_CONFIG       client config: a Host entry per machine with an sshd
#   HPCTRAIN_CLUSTER_SSH_KEY          the client's private key (ed25519, no passphrase)
#   HPCTRAIN_CLUSTER_SSH_KNOWN_HOSTS  the known_hosts file the config uses (accept-new)
#   HPCTRAIN_CLUSTER_SSH_HOSTS        the machines with an sshd (nodes first, then login)
#   HPCTRAIN_CLUSTER_SSH_USER         root
#   HPCTRAIN_CLUSTER_LOGIN            login (10.231.0.2): Slurm's commands work there
#   HPCTRAIN_CLUSTER_ON_LAPTOP        the script that runs a command on the laptop
# Exit status 1 (and nothing on stdout) when up.sh has not made them.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "${here}/lib.sh"

if [[ ! -r ${SSH_DIR}/config || ! -r ${SSH_DIR}/id_ed25519 || ! -r ${SSH_DIR}/hosts ]]; then
    echo "ssh-info.sh: no ssh material under ${SSH_DIR}; run tests/cluster/up.sh" >&2
    exit 1
fi
mapfile -t hosts < <(ssh_hosts)
printf 'HPCTRAIN_CLUSTER_SSH_CONFIG=%q\n' "${SSH_DIR}/config"
printf 'HPCTRAIN_CLUSTER_SSH_KEY=%q\n' "${SSH_DIR}/id_ed25519"
printf 'HPCTRAIN_CLUSTER_SSH_KNOWN_HOSTS=%q\n' "${SSH_DIR}/known_hosts"
printf "HPCTRAIN_CLUSTER_SSH_HOSTS='%s'\n" "${hosts[*]}"
printf 'HPCTRAIN_CLUSTER_SSH_USER=root\n'
printf 'HPCTRAIN_CLUSTER_LOGIN=login\n'
printf 'HPCTRAIN_CLUSTER_LOG_DIR=%q\n' "${STATE_DIR}/log"  # the daemons' logs: sshd-MACHINE.log, slurmctld.log
printf 'HPCTRAIN_CLUSTER_ON_LAPTOP=%q\n' "${here}/on-laptop.sh"

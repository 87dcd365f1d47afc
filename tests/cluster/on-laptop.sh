#!/usr/bin/env bash
# Run a command on the "laptop" of the local test cluster: a machine outside the cluster, with
# no Slurm configuration, that reaches only the login node (over ssh).
#
# Usage (root):  tests/cluster/on-laptop.sh COMMAND [ARGS...]
#   tests/cluster/on-laptop.sh sbatch --wrap true          # fails: no Slurm configuration here
#   tests/cluster/on-laptop.sh ssh login squeue            # works: plain `ssh login` is configured
#
# The command runs in the laptop's network namespace (hpct-laptop, 10.231.0.3/32, one route: to
# login 10.231.0.2), UTS namespace (hostname `laptop`) and mount namespace (an empty tmpfs over
# /etc/slurm, /etc/ssh/ssh_config with a `Host login` entry), in the current directory (the
# filesystem is otherwise the host's: the repository is readable). Every SLURM_* variable,
# SLURM_CONF included, is removed from its environment. The laptop is made by up.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "${here}/lib.sh"

die() {
    echo "on-laptop.sh: error: $*" >&2
    exit 2
}

[[ $# -ge 1 ]] || die "usage: on-laptop.sh COMMAND [ARGS...]"
[[ ${EUID} -eq 0 ]] || die "must run as root"
machine_up laptop || die "the laptop is not up; run tests/cluster/up.sh"

while read -r name; do
    unset "${name}"
done < <(compgen -e | grep '^SLURM_' || true)

machine_nsenter laptop
# The working directory is kept (entering a mount namespace resets it to /).
NSENTER=("${NSENTER[@]/#--wd=\//--wd=${PWD}}")
exec "${NSENTER[@]}" "$@"

#!/usr/bin/env bash
# Install the system packages hpctrain's tests need (Debian/Ubuntu, run as root).
# Idempotent and non-interactive: returns at once when everything is installed;
# runs `apt-get update` only when something is missing.
set -euo pipefail

# Slurm for the local test cluster; openssh (an sshd per node, a login node, a laptop);
# podman with runc (crun fails on this cgroup layout) and catatonit (`podman run --init`);
# lmod (real modules on the nodes); rsync (copying code to hosts); slurmdbd and MariaDB (the
# cluster's accounting: sacct); slurmrestd and the auth/jwt plugin (the REST way in,
# tests/cluster/rest.sh). See tests/cluster/README.md.
PACKAGES=(slurmctld slurmd slurm-client slurmdbd mariadb-server shellcheck iproute2 procps
    openssh-server openssh-client podman runc conmon catatonit lmod rsync util-linux slurmrestd
    slurm-wlm-jwt-plugin)

if [[ ${EUID} -ne 0 ]]; then
    echo "install-system-deps: must run as root" >&2
    exit 1
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "${pkg}" 2>/dev/null || true)
    if [[ "${status}" != "installed" ]]; then
        missing+=("${pkg}")
    fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi

echo "install-system-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-y -q --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)

# Only refresh the package lists when they are absent, or when the install fails
# because they are stale.
if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    apt-get update -q
fi
if ! apt-get install "${apt_opts[@]}" "${missing[@]}"; then
    apt-get update -q
    apt-get install "${apt_opts[@]}" "${missing[@]}"
fi

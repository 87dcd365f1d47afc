#!/usr/bin/env bash
# Install the second Slurm release the test cluster runs (tests/cluster/up.sh with
# HPCTRAIN_CLUSTER_SLURM=24.11): a root of Debian 13 (trixie, Slurm 24.11) made with debootstrap
# from the same package registry as this machine's Debian 12 packages. Its /usr is bound over the
# host's /usr in the mount namespaces of that cluster's daemons and of the tests that talk to it
# (a trixie binary needs trixie's libc); /work, /tmp and /root stay the host's, so the root also
# carries the shared libraries the host's Python and the venv's wheels link against.
#
#   bash scripts/install-slurm-release.sh      # idempotent: returns at once when the root is done
#
# The root lives in ${HPCTRAIN_SLURM_ROOTS:-/var/lib/hpctrain-slurm-roots}/trixie; a file
# .hpctrain-complete in it marks a finished install (a half-made root is removed and redone).
# Run as root, beside the other installs (scripts/test-all.sh): about a minute, no CPU to speak of.
set -euo pipefail

readonly SUITE=trixie
readonly ROOTS=${HPCTRAIN_SLURM_ROOTS:-/var/lib/hpctrain-slurm-roots}
readonly ROOT=${ROOTS}/${SUITE}
readonly DONE=${ROOT}/.hpctrain-complete
readonly MIRROR=http://deb.debian.org/debian
# Slurm's daemons and clients (slurmdbd: a 24.11 slurmctld needs a slurmdbd of its own release);
# munge comes with them. Then what the tests run inside that root: the shell tools hpctrain and
# its tests call, and the libraries of the host's Python (pyenv's build: ssl, ffi, sqlite, readline,
# lzma, bz2, uuid, nsl/tirpc, gssapi) and of the venv's wheels (libstdc++, libgcc).
readonly PACKAGES=(slurmctld slurmd slurm-client slurmdbd munge
    procps iproute2 openssh-client rsync git util-linux hostname ca-certificates
    libssl3t64 libffi8 libsqlite3-0 libreadline8t64 libncursesw6 libtinfo6 liblzma5 libbz2-1.0
    zlib1g libexpat1 libuuid1 libnsl2 libtirpc3t64 libgssapi-krb5-2 libstdc++6 libgcc-s1 libcrypt1)

if [[ ${EUID} -ne 0 ]]; then
    echo "install-slurm-release: must run as root" >&2
    exit 1
fi
[[ -e ${DONE} ]] && exit 0

if ! command -v debootstrap >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap ||
        { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap; }
fi

start=${SECONDS}
rm -rf "${ROOT}"
mkdir -p "${ROOTS}"
include=$(IFS=,; echo "${PACKAGES[*]}")
# minbase: essential packages and apt only; --include resolves the dependencies of the list.
debootstrap --variant=minbase --include="${include}" "${SUITE}" "${ROOT}" "${MIRROR}"
# Nothing of the root runs as a service: no init, the daemons are started by up.sh.
rm -rf "${ROOT}/var/cache/apt/archives/"*.deb
touch "${DONE}"
# (the root's binaries run only where its /usr is /usr: chroot)
echo "install-slurm-release: ${SUITE} root with $(chroot "${ROOT}" slurmctld -V) in $((SECONDS - start)) s"

#!/usr/bin/env bash
# Run a command with the Slurm release of the test cluster that HPCTRAIN_CLUSTER_SLURM names
# (22.05, the default: this machine's own; 24.11: Debian 13's, see tests/cluster/README.md).
# For 24.11 the command runs in a mount namespace of its own where that release's /usr (from the
# root scripts/install-slurm-release.sh made) and its cluster's /etc/slurm are bound over the
# host's: its Slurm clients are 24.11's and talk to the 24.11 cluster (a 22.05 client cannot: Slurm
# speaks to two releases back only). /work, /tmp, /root and /var stay the host's, so the venv's
# Python runs there too (the root carries the libraries it links against). HPCTRAIN_CLUSTER_HOST_IP
# is set to that cluster's host address on its bridge.
#
#   HPCTRAIN_CLUSTER_SLURM=24.11 tests/cluster/release-exec.sh sinfo
#   HPCTRAIN_CLUSTER_SLURM=24.11 tests/cluster/release-exec.sh .venv/bin/python -m pytest tests/slurm/test_report.py
#
# Root only (mount namespaces). Bring the cluster up first: HPCTRAIN_CLUSTER_SLURM=24.11 tests/cluster/up.sh.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "${here}/lib.sh"
(($# > 0)) || { echo "usage: release-exec.sh CMD [ARGS...]" >&2; exit 2; }
if [[ -n ${SLURM_ROOT} && ! -x ${SLURM_ROOT}/usr/bin/sbatch ]]; then
    echo "release-exec.sh: error: no Slurm ${SLURM_RELEASE} root at ${SLURM_ROOT}: run scripts/install-slurm-release.sh" >&2
    exit 1
fi
export HPCTRAIN_CLUSTER_SLURM=${SLURM_RELEASE} HPCTRAIN_CLUSTER_HOST_IP=${HOST_IP}
exec "${RELEASE_EXEC[@]}" "$@"

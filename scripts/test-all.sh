#!/usr/bin/env bash
# Installs everything — system packages (Slurm, shellcheck), the local Slurm cluster, the venv
# with every extra — and runs the whole test suite: unit, real-cluster and real-training tests.
# .ci/run calls exactly this. Needs root (apt, network namespaces).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

start=$SECONDS
bash scripts/install-system-deps.sh
[[ -x .venv/bin/python ]] || python3 -m venv .venv
# torch is pinned by constraints.txt: any other version would pull GBs of CUDA packages.
.venv/bin/pip install -q --disable-pip-version-check -c constraints.txt -e '.[test,rl,jax,watch,docs]'
# DI-engine cannot share that venv (its setuptools pin conflicts with torch's): its own, ~1-2 min.
bash scripts/install-ding-venv.sh
echo "install: $((SECONDS - start)) s"

# One session at a time on this machine's cluster (the tests' fixture takes the same lock and
# sees it held by this shell): nobody else's up.sh/down.sh restarts it under these tests.
exec 9>/run/hpctrain-cluster.lock
flock -w 3600 9 || { echo "test-all: the local cluster is busy (lock /run/hpctrain-cluster.lock)" >&2; exit 1; }
bash tests/cluster/up.sh
# Stop the cluster however the tests end; it is ours (tests/cluster/down.sh ends only what up.sh started).
trap 'bash tests/cluster/down.sh' EXIT

# Each run gets its own index and runs directory, so CI never mixes with a developer's runs.
HPCTRAIN_HOME=$(mktemp -d)
export HPCTRAIN_HOME HPCTRAIN_RUNS_DIR="$HPCTRAIN_HOME/runs"
.venv/bin/python -m pytest -q -rs --durations=15 tests "$@"

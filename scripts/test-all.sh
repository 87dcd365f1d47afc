#!/usr/bin/env bash
# Installs everything — system packages (Slurm, shellcheck), the local Slurm cluster, the venv
# with every extra, DI-engine's venv — and runs the whole test suite, tier by tier
# (docs/testing.md):
#   1. tests/unit, first and alone (under a minute): a broken render fails the run at once,
#      before any cluster starts;
#   2. tests/local (this machine, no cluster) side by side with the cluster tiers
#      tests/slurm, tests/ssh, tests/e2e (one pytest session: they share the cluster's nodes,
#      partitions and sshds, so they never run at the same time as each other).
# At the end: each tier's result and the 15 slowest tests of the whole run.
# .ci/run calls exactly this. Needs root (apt, network namespaces).
#
#   bash scripts/test-all.sh                  # everything
#   bash scripts/test-all.sh tests/slurm      # one tier (any pytest paths and options) against
#                                             # the cluster, without the others
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

start=$SECONDS
logs=$(mktemp -d)
# DI-engine cannot share the main venv (its setuptools pin conflicts with torch's): its own,
# ~1-2 min, installed while the rest installs and the unit tier runs.
bash scripts/install-ding-venv.sh >"${logs}/ding.log" 2>&1 &
ding_pid=$!
bash scripts/install-system-deps.sh
[[ -x .venv/bin/python ]] || python3 -m venv .venv
# torch is pinned by constraints.txt: any other version would pull GBs of CUDA packages.
.venv/bin/pip install -q --disable-pip-version-check -c constraints.txt -e '.[test,rl,jax,watch,docs]'
echo "install (without DI-engine's venv): $((SECONDS - start)) s"

# Each session gets its own index and runs directory, so CI never mixes with a developer's runs.
pytest_session() {  # NAME ARGS...: one pytest session, its junit XML in ${logs}/NAME.xml
    local name=$1
    shift
    HPCTRAIN_HOME="${logs}/home-${name}" HPCTRAIN_RUNS_DIR="${logs}/home-${name}/runs" \
        .venv/bin/python -m pytest -q -rs -p no:cacheprovider --junitxml="${logs}/${name}.xml" "$@"
}

# The 15 slowest tests (setup + call + teardown) of every session of this run.
slowest() {
    .venv/bin/python - "${logs}"/*.xml <<'EOF'
import sys
import xml.etree.ElementTree as ET
cases = []
for path in sys.argv[1:]:
    for case in ET.parse(path).iter("testcase"):
        name = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
        cases.append((float(case.get("time", 0)), name))
print("=" * 30 + " slowest 15 tests of this run " + "=" * 30)
for seconds, name in sorted(cases, reverse=True)[:15]:
    print(f"{seconds:8.2f}s {name}")
EOF
}

if (($# == 0)); then
    # 1. The fast tier, alone: it needs neither the cluster nor DI-engine.
    t=$SECONDS
    pytest_session unit tests/unit || { echo "test-all: the unit tier failed (cluster tiers not run)" >&2; exit 1; }
    echo "tests/unit: $((SECONDS - t)) s"
fi

if ! wait "${ding_pid}"; then
    cat "${logs}/ding.log" >&2
    echo "test-all: DI-engine's venv did not install" >&2
    exit 1
fi
echo "install (all): done $((SECONDS - start)) s after the start"

# One session at a time on this machine's cluster (the tests' fixture takes the same lock and
# sees it held by this shell): nobody else's up.sh/down.sh restarts it under these tests.
exec 9>/run/hpctrain-cluster.lock
flock -w 3600 9 || { echo "test-all: the local cluster is busy (lock /run/hpctrain-cluster.lock)" >&2; exit 1; }
local_pid=
cleanup() {
    if [[ -n ${local_pid} ]]; then kill "${local_pid}" 2>/dev/null || true; fi
    # The cluster is ours (tests/cluster/down.sh ends only what up.sh started).
    bash tests/cluster/down.sh
}
trap cleanup EXIT
bash tests/cluster/up.sh

if (($# > 0)); then
    pytest_session selected "$@" && rc=0 || rc=$?
    slowest
    exit "${rc}"
fi

# 2. The local tier beside the cluster tiers: it uses no cluster state (its own ports, run
# directories and processes on this machine), and the cluster tiers mostly wait on Slurm.
t=$SECONDS
(pytest_session local tests/local >"${logs}/local.out" 2>&1; echo "$? $((SECONDS - t))" >"${logs}/local.rc") &
local_pid=$!
pytest_session cluster tests/slurm tests/ssh tests/e2e && cluster_rc=0 || cluster_rc=$?
echo "tests/slurm tests/ssh tests/e2e: $((SECONDS - t)) s"
wait "${local_pid}" || true
local_pid=
echo "----- tests/local (ran beside the cluster tiers)"
cat "${logs}/local.out"
read -r local_rc local_s <"${logs}/local.rc" || local_rc=1
echo "tests/local: ${local_s:-?} s"
slowest
echo "whole run: $((SECONDS - start)) s"
((cluster_rc == 0 && local_rc == 0))

#!/usr/bin/env bash
# Installs everything — system packages (Slurm, shellcheck), the local Slurm cluster, the venv
# with every extra, DI-engine's venv — and runs the whole test suite, tier by tier
# (docs/testing.md):
#   1. tests/unit, first and alone (under a minute): a broken render fails the run at once,
#      before any cluster starts;
#   2. two sessions side by side: tests/slurm then tests/e2e (Slurm jobs), and tests/local
#      (no cluster) then tests/ssh (the nodes' sshds, once tests/slurm has ended).
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

# 2. Two sessions side by side. The cluster tiers never share the cluster with each other where
# they would meet: a slurm test alters nodes (a head name resolving to loopback, an sshd
# stopped) that the ssh tier uses, and a preemption test's `-p high --exclusive` job preempts
# whatever runs on its nodes. So:
#     session A: tests/slurm, then tests/e2e        (Slurm jobs only)
#     session B: tests/local, then tests/ssh        (no cluster; then the nodes' sshds, no Slurm)
# tests/ssh waits until tests/slurm has ended and tests/e2e has brought the cluster up (its
# fixture's up.sh repairs sshds; see tests/conftest.py::cluster).
t=$SECONDS
(
    pytest_session local tests/local && rc=0 || rc=$?
    echo "tests/local: $((SECONDS - t)) s"
    while [[ ! -e ${logs}/e2e.ready && ! -e ${logs}/a.done ]]; do sleep 1; done
    t_ssh=$SECONDS
    pytest_session ssh tests/ssh && rc_ssh=0 || rc_ssh=$?
    echo "tests/ssh: $((SECONDS - t_ssh)) s (beside tests/e2e)"
    exit $((rc || rc_ssh))
) >"${logs}/b.out" 2>&1 &
local_pid=$!
pytest_session slurm tests/slurm && rc_slurm=0 || rc_slurm=$?
echo "tests/slurm: $((SECONDS - t)) s (beside tests/local)"
t_e2e=$SECONDS
HPCTRAIN_TEST_CLUSTER_READY="${logs}/e2e.ready" pytest_session e2e tests/e2e && rc_e2e=0 || rc_e2e=$?
echo "tests/e2e: $((SECONDS - t_e2e)) s"
touch "${logs}/a.done"
wait "${local_pid}" && rc_b=0 || rc_b=$?
local_pid=
echo "----- tests/local, then tests/ssh (the second session)"
cat "${logs}/b.out"
slowest
echo "whole run: $((SECONDS - start)) s"
((rc_slurm == 0 && rc_e2e == 0 && rc_b == 0))

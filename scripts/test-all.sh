#!/usr/bin/env bash
# Installs everything — system packages (Slurm, shellcheck), the local Slurm cluster, the venv
# with every extra, DI-engine's venv, the real Isaac Lab 3.0's venv — and runs the whole test suite, tier by tier
# (docs/testing.md):
#   1. tests/unit, first (under a minute alone): a broken render stops the run in its first
#      minutes, with the sessions it overlaps;
#   2. beside it, the few cluster tests marked `alone` (they restart or repair the cluster, or
#      count slurmctld's requests), alone on the cluster (the unit tier touches none);
#   3. once they are done (the unit tier may still run), four sessions side by side: tests/slurm
#      on node1..node4; a few files of tests/slurm on a second cluster, Slurm 24.11's
#      (node101..node102, beside the 22.05 one: tests/cluster/README.md), then tests/local (no
#      cluster); tests/ssh (the sshds of node5..node7), then tests/e2e on those nodes (partition
#      side), then a few files of tests/slurm there; a few files of tests/slurm on node8..node10
#      (partition side2), then a few files of tests/local.
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
# Bytecode is written, as on a user's machine, where this project's machines set
# PYTHONDONTWRITEBYTECODE: each module is compiled once, by the first process that imports it,
# instead of by every process (a rank, a torchrun agent, an hpctrain command: torch alone is ~800
# modules) or by a compileall of every venv module, imported or not.
unset PYTHONDONTWRITEBYTECODE
# DI-engine cannot share the main venv (its setuptools pin conflicts with torch's): its own,
# ~1-2 min, installed while the rest installs and the unit tier runs.
# (niced, as the Isaac Lab install below: the unit tier, which everything waits for, comes first)
# (PIP_NO_COMPILE=0: its bytecode is written by what imports it, below)
PIP_NO_COMPILE=0 nice -n 10 bash scripts/install-ding-venv.sh >"${logs}/ding.log" 2>&1 &
ding_pid=$!
# Debian's packages (Slurm, shellcheck...) beside the venv's: neither needs the other.
bash scripts/install-system-deps.sh >"${logs}/apt.log" 2>&1 &
apt_pid=$!
# Slurm 24.11's root (a debootstrap of Debian 13, ~45 s, mostly downloads) once apt's lock is free
# (it may need apt for debootstrap), beside the venv's install and the unit tier.
(
    while kill -0 "${apt_pid}" 2>/dev/null; do sleep 0.5; done
    exec bash scripts/install-slurm-release.sh
) >"${logs}/release.log" 2>&1 &
release_pid=$!
# Each session gets its own index and runs directory, so CI never mixes with a developer's runs.
pytest_session() {  # NAME ARGS...: one pytest session, its junit XML in ${logs}/NAME.xml
    local name=$1
    shift
    # (RUN_IN: a prefix the session runs under, e.g. another Slurm release's clients)
    # shellcheck disable=SC2086  # RUN_IN is words
    HPCTRAIN_HOME="${logs}/home-${name}" HPCTRAIN_RUNS_DIR="${logs}/home-${name}/runs" \
        ${RUN_IN:-} .venv/bin/python -m pytest -q -rs -p no:cacheprovider -o junit_logging=system-out \
        --junitxml="${logs}/${name}.xml" "$@"
}

# The commands the README and docs/testing.md give, run exactly as written (their text is read
# from the pages), so that what a user types is what passes here:
#   - the fast tier (docs/testing.md): in a copy of this checkout (a fresh clone's files), its own
#     venv, `pip install -e '.[test]'` then `pytest tests/unit`: a unit test that imports what
#     the test extra lacks fails the run;
#   - the README's first command: this checkout's .venv, a built wheel (not an editable install)
#     and the main example on the local site; the extras the other tiers need go on top, and
#     every `hpctrain` the cluster sessions run is that install's (HPCTRAIN_TEST_CLI,
#     tests/conftest.py), so that a module or a data file the wheel lacks fails them.
# PIP_NO_COMPILE=0 (pip's own spelling, in the environment, of --no-compile): pip would
# byte-compile every module it installs (~45 core-seconds each time, before anything could
# start); the tiers' processes write the bytecode of what they import (above).
# shellcheck disable=SC2016  # the backticks are Markdown's fence, not a command
readme_command=$(sed -n '/^```bash$/,/^```$/p' README.md | sed -n 2p)
[[ ${readme_command} == "python3 -m venv .venv && "*" && .venv/bin/hpctrain submit examples/cartpole_ppo.yaml --wait" ]] ||
    { echo "test-all: README.md's first command is no longer the install and its example: ${readme_command}" >&2; exit 1; }
fast_tier=$(sed -n '/^# The fast tier, no root, no cluster:$/,/^$/p' docs/testing.md | sed -e '/^#/d' -e '/^$/d')
[[ ${fast_tier} == "python3 -m venv .venv && "*$'\n'".venv/bin/python -m pytest tests/unit" ]] ||
    { echo "test-all: docs/testing.md's fast tier is no longer an install and tests/unit: ${fast_tier}" >&2; exit 1; }
fast_install=${fast_tier%%$'\n'*}
unit_pid=
if (($# == 0)); then
    # 1. The fast tier, first: it needs neither the cluster nor DI-engine (its output once it ends).
    t_unit=$SECONDS
    (
        mkdir -p "${logs}/fast-tier"
        git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "${logs}/fast-tier"
        cd "${logs}/fast-tier"
        PIP_NO_COMPILE=0 bash -c "${fast_install}" >"${logs}/fast-install.log" 2>&1 ||
            { cat "${logs}/fast-install.log"; echo "test-all: docs/testing.md's fast-tier install failed"; exit 1; }
        echo "the fast tier's install (docs/testing.md): $((SECONDS - t_unit)) s"
        pytest_session unit tests/unit
    ) >"${logs}/unit.out" 2>&1 &
    unit_pid=$!
    trap 'kill "${unit_pid}" 2>/dev/null || true' EXIT  # (until the cleanup below replaces it)
fi
if ! HPCTRAIN_HOME="${logs}/home-readme" HPCTRAIN_RUNS_DIR="${logs}/home-readme/runs" PIP_NO_COMPILE=0 \
    bash -c "${readme_command}" >"${logs}/readme.log" 2>&1 || ! grep -q "COMPLETED" "${logs}/readme.log"; then
    cat "${logs}/readme.log" >&2
    echo "test-all: README.md's first command failed" >&2
    exit 1
fi
echo "README.md's install and example: $((SECONDS - start)) s"
# The real Isaac Lab 3.0 in its own Python 3.12 venv, its asset root and Warp's kernels (~2 min,
# 7.4 GB, mostly the CUDA wheels its torch pin brings), beside the unit tier and the first tests.
# Only tests/local and tests/e2e need it, and they wait for it themselves (isaaclab_ready, below),
# after tests that do not (~3 min of slack). Measured on fresh clones: started before the venv
# above, it slowed that install (which everything waits for) by ~45 s; started after the alone
# tier, it slowed the sessions' first tests by more than it saved (1304 s in all against 1223 s);
# beside the unit tier at equal priority it made the tier 108 s instead of ~40: hence nice.
nice -n 10 bash scripts/install-isaaclab.sh >"${logs}/isaaclab.log" 2>&1 &
isaaclab_pid=$!
# torch is pinned by constraints.txt: any other version would pull GBs of CUDA packages.
PIP_NO_COMPILE=0 .venv/bin/pip install -q --disable-pip-version-check -c constraints.txt \
    '.[test,rl,jax,watch,docs,search,export]'
export HPCTRAIN_TEST_CLI=${PWD}/.venv/bin/hpctrain
if ! wait "${apt_pid}"; then
    cat "${logs}/apt.log" >&2
    echo "test-all: the system packages did not install" >&2
    exit 1
fi
echo "install (without DI-engine's venv): $((SECONDS - start)) s"

# A background install is done (any session may ask: it polls, as the install is no child of a
# session's shell); its log when it failed. Isaac Lab's and DI-engine's venvs are needed by
# tests/local and tests/e2e only, which ask for them after tests that do not.
install_ready() {  # WHAT PID MARKER LOG
    local t=$SECONDS
    while kill -0 "$2" 2>/dev/null; do sleep 1; done
    if [[ ! -e $3 ]]; then
        cat "$4" >&2
        echo "test-all: $1 did not install" >&2
        return 1
    fi
    echo "$1 ready (waited $((SECONDS - t)) s)"
}
isaaclab_ready() {
    install_ready "Isaac Lab's venv" "${isaaclab_pid}" .venv-isaaclab/.hpctrain-isaaclab-3.0.0 "${logs}/isaaclab.log"
}
ding_ready() {
    install_ready "DI-engine's venv" "${ding_pid}" .venv-ding/.hpctrain-ding-0.5.3 "${logs}/ding.log"
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

# One session at a time on this machine's cluster (the tests' fixture takes the same lock and
# sees it held by this shell): nobody else's up.sh/down.sh restarts it under these tests.
exec 9>/run/hpctrain-cluster.lock
flock -w 3600 9 || { echo "test-all: the local cluster is busy (lock /run/hpctrain-cluster.lock)" >&2; exit 1; }
exec 8>/run/hpctrain-cluster-24.11.lock
flock -w 3600 8 || { echo "test-all: the Slurm 24.11 cluster is busy (lock /run/hpctrain-cluster-24.11.lock)" >&2; exit 1; }
session_pids=
up_pid=
up24_pid=
cleanup() {
    # A session's subshell held (so that it starts nothing more), its pytest ended, then it.
    local pid
    for pid in ${session_pids}; do
        kill -STOP "${pid}" 2>/dev/null || continue
        pkill -TERM -P "${pid}" 2>/dev/null || true
        kill -KILL "${pid}" 2>/dev/null || true
    done
    if [[ -n ${up_pid} ]]; then wait "${up_pid}" 2>/dev/null || true; fi
    if [[ -n ${up24_pid} ]]; then wait "${up24_pid}" 2>/dev/null || true; fi
    # The clusters are ours (tests/cluster/down.sh ends only what up.sh started).
    bash tests/cluster/down.sh
    HPCTRAIN_CLUSTER_SLURM=24.11 bash tests/cluster/down.sh
}
trap cleanup EXIT
# The clusters start beside the unit tier, which needs none of them; 24.11's once its root is in.
bash tests/cluster/up.sh >"${logs}/up.log" 2>&1 &
up_pid=$!
(
    while kill -0 "${release_pid}" 2>/dev/null; do sleep 0.5; done
    HPCTRAIN_CLUSTER_SLURM=24.11 exec bash tests/cluster/up.sh
) >"${logs}/up-24.11.log" 2>&1 &
up24_pid=$!

session_pids=${unit_pid}

if ! wait "${up_pid}"; then
    up_pid=
    cat "${logs}/up.log" >&2
    echo "test-all: the local cluster did not start" >&2
    exit 1
fi
up_pid=
cat "${logs}/up.log"

if (($# > 0)); then
    ding_ready
    wait "${up24_pid}" || { cat "${logs}/up-24.11.log" >&2; echo "test-all: the Slurm 24.11 cluster did not start" >&2; exit 1; }
    up24_pid=
    isaaclab_ready
    pytest_session selected "$@" && rc=0 || rc=$?
    slowest
    exit "${rc}"
fi

# Every session below shares the cluster this script brought up: the tests' fixture does not
# run up.sh again (its repairs would undo what another session's test altered on purpose).
export HPCTRAIN_TEST_CLUSTER_SHARED=1

# 2. The tests that need the cluster to themselves, alone on it, beside the unit tier (which
# touches no cluster, no ssh socket): ~25 s off the critical path.
t=$SECONDS
pytest_session alone -m alone tests/slurm && rc_alone=0 || rc_alone=$?
echo "tests marked alone: $((SECONDS - t)) s"

# (DI-engine's and Isaac Lab's venvs go on beside the sessions, which ask for them where they
# need them)
if ! wait "${up24_pid}"; then
    up24_pid=
    cat "${logs}/release.log" "${logs}/up-24.11.log" >&2
    echo "test-all: the Slurm 24.11 cluster did not start" >&2
    exit 1
fi
up24_pid=
grep -h "install-slurm-release:" "${logs}/release.log" || true
cat "${logs}/up-24.11.log"

# 3. Four sessions side by side, on parts of the cluster that never meet: a Slurm test alters
# nodes (a head name resolving to loopback, a link cut, an sshd stopped) and preempts with
# `-p high --exclusive`, all on node1..node4 (partitions debug and high); the e2e tier's jobs run
# in partition side and the ssh tier's hosts are the same side nodes (node5..node7); session D's
# in partition side2 (node8..node10); session B's Slurm files run on the other cluster, Slurm
# 24.11's (node101..node102, its partition debug). They share nothing but slurmctld
# (tests/cluster/up.sh), and session B not even that. Four, not three: with three, the CPUs sat
# idle ~10 % of the run, all sessions at once waiting on a job or a requeue; a fourth fills it.
#     session A: tests/slurm (but the files below)
#     session B: release_files on the Slurm 24.11 cluster (its clients, through
#                tests/cluster/release-exec.sh): with session A on 22.05, every command that
#                parses Slurm's output runs on each release (docs/slurm-releases.md); then
#                tests/local (but local_d_files), once Isaac Lab's venv is in
#     session C: tests/ssh, then tests/e2e (once Isaac Lab's and DI-engine's venvs are in), then
#                side_files in partition side
#     session D: side2_files in partition side2, then local_d_files
# The files moved off session A are Slurm tests that name no node of node1..node4 (their node
# faults, if any, land on the job's own nodes: side2 has three, for a 2-node job that moves off
# one), their jobs sent to their partition by Slurm's own SBATCH_PARTITION (it overrides the job
# script's #SBATCH --partition; session B's cluster has only its default partition), so that the
# Slurm tier's serial chain ends with the other sessions.
side_files=(tests/slurm/test_operate.py tests/slurm/test_lmod_cluster.py tests/slurm/test_multinode.py
    tests/slurm/test_rest.py)
side2_files=(tests/slurm/test_survive.py tests/slurm/test_containers.py tests/slurm/test_hang_culprit.py
    tests/slurm/test_pbt.py)
release_files=(tests/slurm/test_docs_screens.py tests/slurm/test_submitit.py tests/slurm/test_notebook.py
    tests/slurm/test_chains.py tests/slurm/test_report.py tests/slurm/test_idle_from_start.py
    tests/slurm/test_slurm_release.py tests/slurm/test_notify.py tests/slurm/test_preempt_cap_releases.py)
# tests/local files of session D (none needs Isaac Lab's venv), the rest in session B.
local_d_files=(tests/local/test_report_local.py tests/local/test_pbt_local.py
    tests/local/test_launch_check.py tests/local/test_search_local.py tests/local/test_eval_local.py
    tests/local/test_hostile_local.py)
# (A real preemption that hpctrain requeues on 22.05: tests/slurm/test_containers.py, session D.)
t=$SECONDS
(
    HPCTRAIN_CLUSTER_SLURM=24.11 RUN_IN="bash tests/cluster/release-exec.sh" \
        pytest_session slurm-24.11 "${release_files[@]}" && rc_release=0 || rc_release=$?
    echo "${release_files[*]}: $((SECONDS - t)) s (Slurm 24.11)"
    t_local=$SECONDS
    isaaclab_ready && pytest_session local "${local_d_files[@]/#/--ignore=}" tests/local && rc=0 || rc=$?
    echo "tests/local: $((SECONDS - t_local)) s (after the Slurm 24.11 files; but session D's)"
    exit $((rc || rc_release))
) >"${logs}/b.out" 2>&1 &
b_pid=$!
(
    SBATCH_PARTITION=side2 pytest_session slurm-side2 "${side2_files[@]}" && rc_side2=0 || rc_side2=$?
    echo "${side2_files[*]}: $((SECONDS - t)) s (partition side2)"
    t_local=$SECONDS
    pytest_session local-d "${local_d_files[@]}" && rc=0 || rc=$?
    echo "${local_d_files[*]}: $((SECONDS - t_local)) s (after the side2 files)"
    exit $((rc || rc_side2))
) >"${logs}/d.out" 2>&1 &
d_pid=$!
(
    pytest_session ssh tests/ssh && rc_ssh=0 || rc_ssh=$?
    echo "tests/ssh: $((SECONDS - t)) s"
    t_e2e=$SECONDS
    isaaclab_ready && ding_ready && pytest_session e2e tests/e2e && rc=0 || rc=$?
    echo "tests/e2e: $((SECONDS - t_e2e)) s (after tests/ssh)"
    t_side=$SECONDS
    SBATCH_PARTITION=side pytest_session slurm-side "${side_files[@]}" && rc_side=0 || rc_side=$?
    echo "${side_files[*]}: $((SECONDS - t_side)) s (partition side, after tests/e2e)"
    exit $((rc || rc_ssh || rc_side))
) >"${logs}/c.out" 2>&1 &
c_pid=$!
(
    pytest_session slurm -m "not alone" "${side_files[@]/#/--ignore=}" "${side2_files[@]/#/--ignore=}" \
        "${release_files[@]/#/--ignore=}" tests/slurm && rc=0 || rc=$?
    echo "tests/slurm: $((SECONDS - t)) s"
    exit "${rc}"
) >"${logs}/a.out" 2>&1 &
a_pid=$!
session_pids="${unit_pid} ${a_pid} ${b_pid} ${c_pid} ${d_pid}"
# The sessions start while the unit tier ends (the CPUs are busy either way: ~25 s off the
# critical path); a failed unit tier stops them at once (cleanup, on exit).
wait "${unit_pid}" && rc_unit=0 || rc_unit=$?
cat "${logs}/unit.out"
((rc_unit == 0)) || { echo "test-all: the unit tier failed (the sessions were stopped)" >&2; exit 1; }
echo "tests/unit: $((SECONDS - t_unit)) s"
session_pids="${a_pid} ${b_pid} ${c_pid} ${d_pid}"
wait "${a_pid}" && rc_slurm=0 || rc_slurm=$?
echo "----- tests/slurm (the first session)"
cat "${logs}/a.out"
wait "${b_pid}" && rc_b=0 || rc_b=$?
echo "----- Slurm 24.11's files, then tests/local (the second session)"
cat "${logs}/b.out"
wait "${c_pid}" && rc_c=0 || rc_c=$?
echo "----- tests/ssh, then tests/e2e, then Slurm tests on the side nodes (the third session)"
cat "${logs}/c.out"
wait "${d_pid}" && rc_d=0 || rc_d=$?
session_pids=
echo "----- Slurm tests on the side2 nodes, then a few files of tests/local (the fourth session)"
cat "${logs}/d.out"
slowest
echo "whole run: $((SECONDS - start)) s"
((rc_alone == 0 && rc_slurm == 0 && rc_b == 0 && rc_c == 0 && rc_d == 0))

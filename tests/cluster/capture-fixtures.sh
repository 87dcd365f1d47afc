#!/usr/bin/env bash
# Capture the real output of every Slurm command hpctrain parses, from the test cluster of the
# release HPCTRAIN_CLUSTER_SLURM names (22.05 or 24.11), into
# tests/unit/fixtures/slurm-RELEASE/captured/: tests/unit/test_slurm_releases.py runs each parser
# on both releases' output.
#
#   flock -w 3600 /run/hpctrain-cluster.lock tests/cluster/capture-fixtures.sh              # 22.05
#   HPCTRAIN_CLUSTER_SLURM=24.11 flock -w 3600 /run/hpctrain-cluster-24.11.lock \
#       tests/cluster/capture-fixtures.sh                                                    # 24.11
#
# The cluster must be up (tests/cluster/up.sh) and otherwise idle; the jobs it submits (about
# 40 s in all) are cancelled at the end, and a reservation "fixture-maint" made and deleted.
# The scenario, the same on both releases: a running 2-node job, a failed one (exit 3), a
# completed one, a held one and one pending on its begin time, an array 0-3%1 (one task
# running, the rest pending on JobArrayTaskLimit), a maintenance reservation in 30 minutes.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "${here}/lib.sh"
out=${here}/../unit/fixtures/slurm-${SLURM_RELEASE}/captured
mkdir -p "${out}"
tmp=$(mktemp -d)
trap 'rm -rf "${tmp}"' EXIT

# Every command below runs with this release's clients.
if [[ -n ${SLURM_ROOT} && ${HPCTRAIN_IN_RELEASE:-} != "${SLURM_RELEASE}" ]]; then
    HPCTRAIN_IN_RELEASE=${SLURM_RELEASE} exec "${RELEASE_EXEC[@]}" bash "$0" "$@"
fi

cd "${tmp}"
sub() { sbatch --parsable -o "${tmp}/slurm-%j.out" "$@"; }
ok=$(sub -J ok --wrap 'true')
fail=$(sub -J fail --wrap 'exit 3')
run=$(sub -J run -N 2 -t 00:05:00 --wrap 'sleep 300')
held=$(sub -J held -H --wrap 'true')
later=$(sub -J later --begin=now+1hour --wrap 'true')
array=$(sub -J arr -a 0-3%1 -t 00:05:00 --wrap 'sleep 300')
ids="${ok},${fail},${run},${held},${later},${array}"
cleanup() {
    scancel "${run}" "${held}" "${later}" "${array}" 2>/dev/null || true
    scontrol delete reservation=fixture-maint 2>/dev/null || true
    rm -rf "${tmp}"
}
trap cleanup EXIT
# Until the short ones ended and the long ones run (the array's first task too).
for _ in $(seq 120); do
    states=$(squeue -h -j "${ids}" -t all -o '%i %T' | sort)
    if grep -q "^${ok} COMPLETED" <<<"${states}" && grep -q "^${fail} FAILED" <<<"${states}" &&
        grep -q "^${run} RUNNING" <<<"${states}" && grep -q "^${array}_0 RUNNING" <<<"${states}"; then
        break
    fi
    sleep 0.5
done
scontrol create reservation ReservationName=fixture-maint StartTime=now+30minutes Duration=60 \
    Nodes=ALL Users=root Flags=MAINT >/dev/null

squeue --json --all --states=all >"${out}/squeue.json"
scontrol -o show job >"${out}/scontrol.txt"
squeue --start --noheader --format='%i|%P|%Q|%S|%r' >"${out}/squeue-start.txt"
scontrol -o show reservation >"${out}/reservation.txt"
scontrol -o show partition >"${out}/partition.txt"
scontrol show config >"${out}/config.txt"
sinfo -h -o '%P|%l|%D|%c|%m|%G|%N' >"${out}/sinfo.txt"
sbatch --test-only -N 2 -t 00:10:00 --wrap true >"${out}/test-only.txt" 2>&1 || true
sbatch --test-only -N 2 -t 02:00:00 --wrap true >"${out}/test-only-maint.txt" 2>&1 || true
{ sbatch --test-only -p nosuch --wrap true 2>&1 || true; } >"${out}/test-only-refused.txt"
scontrol --version >"${out}/version.txt"
# Accounting: what sacct says of the finished jobs (records.py's and accounting.py's fields).
sleep 2
sacct -X -P -n -o JobID,State,ExitCode,NodeList,NNodes,Start,End,Reason -j "${ids}" >"${out}/sacct.txt"
SLURM_TIME_FORMAT=%s sacct -n -P --duplicates -j "${ids}" \
    -o JobIDRaw,JobID,State,Submit,Start,End,ElapsedRaw,AllocTRES,AllocCPUS,TotalCPU,MaxRSS \
    >"${out}/sacct-accounting.txt"
echo "capture-fixtures: Slurm ${SLURM_RELEASE} output in ${out}"

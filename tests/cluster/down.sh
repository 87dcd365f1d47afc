#!/usr/bin/env bash
# Tear down "localcluster" (see tests/cluster/up.sh): stop only what up.sh started.
#
#   1. slurmctld, the slurmds and the sshds, by the PIDs in their pid files (after checking
#      /proc/PID/comm), never by name;
#   2. any process still inside the cluster's network namespaces (job steps, ssh sessions,
#      containers started with --network=host, commands run on the laptop);
#   3. the machines' UTS and mount namespaces (the bind-mounted namespace files), the network
#      namespaces, veths and the bridge; the /etc/hosts block.
#
# Leaves /etc/slurm/slurm.conf, the logs, the ssh keys and known_hosts under
# /var/lib/hpctrain-localcluster, the podman image and the installed packages in place.
# Idempotent: fine when nothing is up, or only part of it.
# Usage (root):  tests/cluster/down.sh [--quiet]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "${here}/lib.sh"

quiet=0
if [[ ${1:-} == --quiet ]]; then quiet=1; fi
start_ns=$(date +%s%N)

if [[ ${EUID} -ne 0 ]]; then
    echo "down.sh: error: must run as root" >&2
    exit 1
fi

if [[ ${HPCTRAIN_CLUSTER_LOCKED:-0} != 1 && -d ${STATE_DIR} ]]; then
    exec 9>"${STATE_DIR}/.lock"
    flock -w 120 9 || {
        echo "down.sh: error: another up.sh/down.sh holds ${STATE_DIR}/.lock" >&2
        exit 1
    }
fi

# wait_gone TIMEOUT_TENTHS PID...: wait until none of the PIDs runs.
wait_gone() {
    local tenths=$1 pid alive
    shift
    while ((tenths-- > 0)); do
        alive=0
        for pid in "$@"; do
            if running "${pid}"; then alive=1; fi
        done
        ((alive)) || return 0
        sleep 0.1
    done
    return 1
}

# Daemons, by pid file, only when /proc/PID/comm matches.
daemon_pids=()
for pidfile in "${STATE_DIR}/run/slurmctld.pid" "${STATE_DIR}"/run/slurmd-*.pid "${STATE_DIR}"/run/sshd-*.pid \
    "${STATE_DIR}/run/slurmdbd.pid" "${STATE_DIR}/db/mariadbd.pid" "${STATE_DIR}/rest/slurmrestd.pid"; do
    [[ -r ${pidfile} ]] || continue
    case ${pidfile##*/} in
        slurmctld.pid) want=slurmctld ;;
        slurmdbd.pid) want=slurmdbd ;;
        slurmrestd.pid) want=slurmrestd ;;
        mariadbd.pid) want=mariadbd ;;
        slurmd-*) want=slurmd ;;
        *) want=sshd ;;
    esac
    if pid_alive "${pidfile}" "${want}"; then
        daemon_pids+=("$(<"${pidfile}")")
    fi
done

# Our network namespaces: hpct-node<N>, hpct-login, hpct-laptop.
namespaces=()
if [[ -d /run/netns ]]; then
    for path in /run/netns/hpct*; do
        name=${path##*/}
        if [[ ${name} =~ ^(${NS_PREFIX}[0-9]+|${LOGIN_NS}|${LAPTOP_NS})$ ]]; then namespaces+=("${name}"); fi
    done
fi

# ns_pids: every process inside our namespaces (daemons, job steps, sessions, their children).
ns_pids() {
    local ns pid
    for ns in "${namespaces[@]}"; do
        while read -r pid; do
            if [[ ${pid} =~ ^[0-9]+$ ]]; then echo "${pid}"; fi
        done < <(ip netns pids "${ns}" 2>/dev/null || true)
    done
}

# One SIGTERM to the daemons and to the jobs' processes together; the daemons get
# up to 3 s to exit cleanly (slurmctld needs ~2 s, slurmd ~1.5 s). slurmstepd
# ignores SIGTERM: whatever is left in the namespaces afterwards gets SIGKILL.
mapfile -t job_pids < <(ns_pids)
n_stopped=$((${#daemon_pids[@]} + ${#job_pids[@]}))
if ((n_stopped > 0)); then
    kill -TERM "${daemon_pids[@]}" "${job_pids[@]}" 2>/dev/null || true
fi
if ((${#daemon_pids[@]} > 0)) && ! wait_gone 30 "${daemon_pids[@]}"; then
    kill -KILL "${daemon_pids[@]}" 2>/dev/null || true
    wait_gone 20 "${daemon_pids[@]}" || echo "down.sh: warning: still running after SIGKILL: ${daemon_pids[*]}" >&2
fi
for _ in 1 2 3 4 5; do
    mapfile -t left < <(ns_pids)
    ((${#left[@]} > 0)) || break
    kill -KILL "${left[@]}" 2>/dev/null || true
    wait_gone 20 "${left[@]}" || true
done
mapfile -t left < <(ns_pids)
if ((${#left[@]} > 0)); then
    echo "down.sh: warning: processes still inside the cluster's namespaces: ${left[*]}" >&2
fi
rm -f "${STATE_DIR}/run/slurmctld.pid" "${STATE_DIR}"/run/slurmd-*.pid "${STATE_DIR}"/run/sshd-*.pid \
    "${STATE_DIR}/run/slurmdbd.pid" "${STATE_DIR}/db/mariadbd.pid" "${STATE_DIR}/rest/slurmrestd.pid"

# The machines' UTS and mount namespaces: unmount their namespace files (with no process left
# in them, that ends them), then the private bind mount of ${NS_DIR} itself.
if [[ -d ${NS_DIR} ]]; then
    mapfile -t ns_files < <(awk -v d="${NS_DIR}/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo)
    for f in "${ns_files[@]}"; do
        umount "${f}" 2>/dev/null || umount -l "${f}" || true
    done
    rm -f "${NS_DIR}"/*.uts "${NS_DIR}"/*.mnt 2>/dev/null || true
    for _ in 1 2 3; do
        mountpoint -q "${NS_DIR}" || break
        umount "${NS_DIR}" 2>/dev/null || umount -l "${NS_DIR}" || true
    done
    rmdir "${NS_DIR}" 2>/dev/null || true
    rmdir "${NS_DIR%/*}" 2>/dev/null || true
fi

for ns in "${namespaces[@]}"; do
    ip netns delete "${ns}" 2>/dev/null || true
done

# Host ends of the veths (normally gone with their namespace), then the bridge.
for path in /sys/class/net/hpct*; do
    name=${path##*/}
    if [[ ${name} =~ ^(${VETH_PREFIX}[0-9]+|${LOGIN_NS/-/-v}|${LAPTOP_NS/-/-v})$ ]]; then
        ip link delete "${name}" 2>/dev/null || true
    fi
done
if [[ -e /sys/class/net/${BRIDGE} ]]; then
    ip link delete "${BRIDGE}" type bridge
fi

# /etc/hosts block, rewritten in place (it may be a bind mount).
if grep -qxF "${HOSTS_BEGIN}" /etc/hosts; then
    exec 7>"${HOSTS_LOCK}"
    flock -w 30 7 || echo "down.sh: warning: ${HOSTS_LOCK} held for 30 s; editing /etc/hosts anyway" >&2
    tmp=$(mktemp)
    sed "/^${HOSTS_BEGIN}\$/,/^${HOSTS_END}\$/d" /etc/hosts >"${tmp}"
    cat "${tmp}" >/etc/hosts
    rm -f "${tmp}"
fi

if ((!quiet)); then
    now=$(date +%s%N)
    printf 'down.sh: localcluster%s down (%d processes stopped, %d namespaces removed) in %d.%02d s\n' \
        "${SUFFIX}" "${n_stopped}" "${#namespaces[@]}" \
        $(((now - start_ns) / 1000000000)) $(((now - start_ns) / 10000000 % 100))
fi

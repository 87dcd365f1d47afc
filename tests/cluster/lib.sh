# shellcheck shell=bash disable=SC2034  # the constants are for the scripts that source this
# Names, paths and small helpers shared by the scripts in tests/cluster/ (sourced, not run).
# See tests/cluster/README.md for what they mean.

readonly CLUSTER=localcluster
# The Slurm release (HPCTRAIN_CLUSTER_SLURM): 22.05, this machine's own Debian 12 packages, or
# 24.11, Debian 13's, from the root scripts/install-slurm-release.sh makes (a trixie binary needs
# trixie's libc: its daemons and clients run in mount namespaces where that root's /usr is bound,
# see release_mounts). The two are separate clusters that run at the same time: each has its own
# bridge and subnet, namespaces, node names, ports, state directory, lock and /etc/hosts block.
readonly SLURM_RELEASE=${HPCTRAIN_CLUSTER_SLURM:-22.05}
case ${SLURM_RELEASE} in
    22.05)
        readonly SLURM_ROOT='' SUFFIX='' NODE_PREFIX=node
        readonly STATE_DIR=/var/lib/hpctrain-localcluster
        readonly CONF=/etc/slurm/slurm.conf
        readonly BRIDGE=hpct0 SUBNET_PREFIX=10.231.0
        readonly NS_PREFIX=hpct-node VETH_PREFIX=hpct-n
        readonly CTLD_PORT=6817 DBD_PORT=6819 DB_PORT=6829
        ;;
    24.11)
        readonly SLURM_ROOT=${HPCTRAIN_SLURM_ROOTS:-/var/lib/hpctrain-slurm-roots}/trixie
        readonly SUFFIX=-24.11 NODE_PREFIX=node10 # node101, node102...: tests match "node<digits>"
        readonly STATE_DIR=/var/lib/hpctrain-localcluster-24.11
        # (bound over /etc/slurm where this release runs: its clients find it at the usual place)
        readonly CONF=/var/lib/hpctrain-localcluster-24.11/etc/slurm/slurm.conf
        readonly BRIDGE=hpct1 SUBNET_PREFIX=10.231.1
        readonly NS_PREFIX=hpct1-node VETH_PREFIX=hpct1-n
        # (slurmctld and slurmdbd listen on every address of the host: ports of their own)
        readonly CTLD_PORT=6827 DBD_PORT=6839 DB_PORT=6849
        ;;
    *)
        echo "tests/cluster: error: HPCTRAIN_CLUSTER_SLURM must be 22.05 or 24.11 (got '${SLURM_RELEASE}')" >&2
        exit 1
        ;;
esac
readonly HOST_IP=${SUBNET_PREFIX}.1
readonly LOGIN_IP=${SUBNET_PREFIX}.2
readonly LAPTOP_IP=${SUBNET_PREFIX}.3
readonly LOGIN_NS=hpct${SUFFIX:+1}-login LAPTOP_NS=hpct${SUFFIX:+1}-laptop
readonly HOSTS_BEGIN="# BEGIN hpctrain-localcluster${SUFFIX}"
readonly HOSTS_END="# END hpctrain-localcluster${SUFFIX}"
# Both releases' clusters edit /etc/hosts (each its own block), and may start or stop at the
# same time: each read-modify-write of it holds this lock.
readonly HOSTS_LOCK=/run/hpctrain-etc-hosts.lock
# The lock every pytest session or shell user of this cluster holds (tests/conftest.py).
readonly CLUSTER_LOCK=/run/hpctrain-cluster${SUFFIX}.lock
# The UTS and mount namespaces of every machine (nodeI, login, laptop) are kept as bind-mounted
# namespace files here; the directory is a private bind mount of itself (a mount namespace file
# may only live on a mount that does not propagate into the namespace it names).
readonly NS_DIR=/run/hpctrain-localcluster${SUFFIX}/ns
readonly HOSTS_DIR=${STATE_DIR}/hosts
readonly SSH_DIR=${STATE_DIR}/ssh
readonly LOOPBACK_IP=127.0.1.1
readonly IMAGE=localhost/hpctrain-test:latest
readonly IMAGES_JSON=/var/lib/containers/storage/overlay-images/images.json
# Daemons get a clean environment, and no stdio of the caller (a test runner capturing output
# would otherwise wait for them).
readonly DAEMON_ENV=(env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8)

node_ip() { echo "${SUBNET_PREFIX}.$((10 + $1))"; }

# RELEASE_MOUNTS: the shell commands (sh -c) that make a new mount namespace this release's:
# its root's /usr over the host's, with what in /etc belongs to that /usr (the loader's cache,
# the alternatives' links: awk is mawk there), this cluster's configuration over /etc/slurm.
# Empty for the host's own release. /work, /tmp, /root, /var stay the host's.
if [[ -n ${SLURM_ROOT} ]]; then
    readonly RELEASE_MOUNTS="mount --bind ${SLURM_ROOT}/usr /usr && mount --bind ${SLURM_ROOT}/etc/ld.so.cache /etc/ld.so.cache && mount --bind ${SLURM_ROOT}/etc/alternatives /etc/alternatives && mount --bind ${CONF%/*} /etc/slurm"
else
    readonly RELEASE_MOUNTS=
fi

# RELEASE_EXEC: the command prefix that runs a command with this release's Slurm (a mount
# namespace of its own, see RELEASE_MOUNTS); empty for the host's own release.
if [[ -n ${RELEASE_MOUNTS} ]]; then
    # shellcheck disable=SC2016  # "$@" expands in the inner shell
    readonly RELEASE_EXEC=(unshare --mount --propagation slave sh -c "${RELEASE_MOUNTS}"' && exec "$@"' sh)
else
    readonly RELEASE_EXEC=()
fi

# machine_netns MACHINE: the network namespace of nodeI, login or laptop.
machine_netns() {
    case $1 in
        "${NODE_PREFIX}"[0-9]*) echo "${NS_PREFIX}${1#"${NODE_PREFIX}"}" ;;
        login) echo "${LOGIN_NS}" ;;
        laptop) echo "${LAPTOP_NS}" ;;
        *) return 1 ;;
    esac
}

# machine_ip MACHINE
machine_ip() {
    case $1 in
        "${NODE_PREFIX}"[0-9]*) node_ip "${1#"${NODE_PREFIX}"}" ;;
        login) echo "${LOGIN_IP}" ;;
        laptop) echo "${LAPTOP_IP}" ;;
        *) return 1 ;;
    esac
}

# machine_up MACHINE: its network, UTS and mount namespaces exist.
machine_up() {
    local netns
    netns=$(machine_netns "$1") || return 1
    [[ -e /run/netns/${netns} ]] && mount_file_is_ns "${NS_DIR}/$1.mnt" && mount_file_is_ns "${NS_DIR}/$1.uts"
}

# mount_file_is_ns FILE: FILE is a bound namespace file (its inode lives on nsfs).
mount_file_is_ns() {
    [[ -e $1 ]] && [[ $(stat -f -c %T "$1" 2>/dev/null) == nsfs ]]
}

# machine_nsenter MACHINE: sets NSENTER to the command prefix that runs a command in MACHINE's
# network, UTS and mount namespaces (working directory /: entering a mount namespace resets it).
machine_nsenter() {
    local netns
    netns=$(machine_netns "$1") || return 1
    NSENTER=(nsenter "--net=/run/netns/${netns}" "--uts=${NS_DIR}/$1.uts" "--mount=${NS_DIR}/$1.mnt" --wd=/ --)
}

# pid_alive PIDFILE COMM: the pid file names a live process whose comm is COMM (no forks).
pid_alive() {
    local pid comm
    [[ -r $1 ]] || return 1
    read -r pid <"$1" || return 1
    [[ ${pid} =~ ^[0-9]+$ ]] || return 1
    { read -r comm <"/proc/${pid}/comm"; } 2>/dev/null || return 1
    [[ ${comm} == "$2" ]]
}

# running PID: the process exists and is not a zombie.
running() {
    local stat
    { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != Z ]]
}

# read_file FILE VAR: the whole content of FILE into VAR, byte-exact, without a fork.
read_file() {
    local -n _out=$2
    _out=
    [[ -r $1 ]] || return 1
    IFS= read -r -d '' _out <"$1" || true
}

# render_node_hosts I HOSTS VAR: nodeI's /etc/hosts into VAR: HOSTS (the host's file), with nodeI's
# own name on the loopback address when ${HOSTS_DIR}/nodeI.loopback exists. No forks.
render_node_hosts() {
    local i=$1 nl=$'\n' ip
    local -n _hosts_out=$3
    _hosts_out=$2
    if [[ -e ${HOSTS_DIR}/${NODE_PREFIX}${i}.loopback ]]; then
        ip=${SUBNET_PREFIX}.$((10 + i))
        _hosts_out=${_hosts_out//"${nl}${ip} ${NODE_PREFIX}${i}${nl}"/"${nl}${LOOPBACK_IP} ${NODE_PREFIX}${i}${nl}"}
    fi
}

# sync_node_hosts I...: make each nodeI's hosts file what it should be, rewriting it in place
# (it is bind-mounted over /etc/hosts in nodeI's mount namespace: a new inode would not be seen
# there). Appends the names of the nodes whose file changed to HOSTS_CHANGED.
HOSTS_CHANGED=()
sync_node_hosts() {
    local i hosts want have
    read_file /etc/hosts hosts
    for i in "$@"; do
        render_node_hosts "${i}" "${hosts}" want
        read_file "${HOSTS_DIR}/${NODE_PREFIX}${i}" have || have=
        if [[ ${have} != "${want}" ]]; then
            printf '%s' "${want}" >"${HOSTS_DIR}/${NODE_PREFIX}${i}"
            HOSTS_CHANGED+=("${NODE_PREFIX}${i}")
        fi
    done
}

# ssh_hosts: the machines with an sshd, as written by up.sh (nodes first, then login).
ssh_hosts() {
    [[ -r ${SSH_DIR}/hosts ]] || return 1
    cat "${SSH_DIR}/hosts"
}

# start_sshd MACHINE: one sshd in MACHINE's namespaces, listening on MACHINE's IP only. sshd
# daemonizes first, then binds its socket, then writes its pid file: once the pid file names a
# live sshd it accepts connections. Waits for that (at most 5 s).
start_sshd() {
    local machine=$1 NSENTER pidfile=${STATE_DIR}/run/sshd-$1.pid
    mkdir -p /run/sshd
    rm -f "${pidfile}"
    machine_nsenter "${machine}"
    "${DAEMON_ENV[@]}" "${NSENTER[@]}" /usr/sbin/sshd -f "${SSH_DIR}/sshd_config-${machine}" \
        -E "${STATE_DIR}/log/sshd-${machine}.log" </dev/null >>"${STATE_DIR}/log/sshd-${machine}.stdout" 2>&1 ||
        return 1
    for _ in $(seq 250); do
        pid_alive "${pidfile}" sshd && return 0
        sleep 0.02
    done
    return 1
}

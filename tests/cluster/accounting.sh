# shellcheck shell=bash
# The test cluster's accounting (sourced by up.sh): MariaDB and slurmdbd on the host, so that
# `sacct` answers for the cluster's jobs as on a real site (requeued attempts, GPU TRES).
#
#   mariadbd  ${DB_DIR}/data, 127.0.0.1:${DB_PORT} only (and a socket of its own), user mysql
#             (its pid file is in ${DB_DIR}: it writes it as mysql; its log: log/mariadb.stdout);
#             an empty job history at every cold start, copied from ${DB_DIR}.template (job ids
#             restart at 1 then: old records of the same ids would make `sacct --duplicates` lie)
#   slurmdbd  /etc/slurm/slurmdbd.conf (mode 600, with a marker line), port 6819 on the host,
#             reached at ${HOST_IP} from the nodes and login (AccountingStorageHost)
#   sacctmgr  the cluster registered in the template (it brings the account and user root)
# down.sh stops both by their pid files. See README.md ("Accounting").

readonly DB_DIR=${STATE_DIR}/db
# (DB_PORT and DBD_PORT: lib.sh, each release's own; slurmdbd.conf beside slurm.conf)
readonly DBD_CONF=${CONF%/*}/slurmdbd.conf

# render_slurmdbd_conf PASSWORD
render_slurmdbd_conf() {
    cat <<EOF
${MARKER}
AuthType=auth/none
${JWT_LINES}
DbdHost=$(hostname -s)
DbdAddr=${HOST_IP}
${SUFFIX:+DbdPort=${DBD_PORT}
}SlurmUser=root
PidFile=${STATE_DIR}/run/slurmdbd.pid
LogFile=${STATE_DIR}/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=${DB_PORT}
StorageUser=slurm
StoragePass=$1
StorageLoc=slurm_acct_db
EOF
}

# retry TENTHS CMD...: run CMD (quietly) until it succeeds, at most TENTHS times, 0.1 s apart.
retry() {
    local tries=$1
    shift
    while ! "$@" >/dev/null 2>&1; do
        ((--tries > 0)) || return 1
        sleep 0.1
    done
}

# detached CMD...: CMD with no file descriptor of ours but stdin, stdout and stderr: a daemon
# must not hold a lock it inherited (/run/hpctrain-cluster.lock, up.sh's own) for its life.
detached() (
    local fd
    for fd in /proc/"${BASHPID}"/fd/*; do
        fd=${fd##*/}
        ((fd <= 2)) || exec {fd}>&-
    done
    exec "$@"
)

# start_db DIR: mariadbd on DIR/data, in the background (its pid file: DIR/mariadbd.pid); waits
# until it answers on its socket.
start_db() {
    # mariadbd stays in the foreground: setsid detaches it from the caller's session.
    detached "${DAEMON_ENV[@]}" setsid -f mariadbd --no-defaults --user=mysql --datadir="$1/data" \
        --bind-address=127.0.0.1 --port="${DB_PORT}" --socket="$1/mysqld.sock" --pid-file="$1/mariadbd.pid" \
        --skip-name-resolve --innodb-log-file-size=8M --skip-log-bin </dev/null >>"${STATE_DIR}/log/mariadb.stdout" 2>&1
    retry 100 mariadb --no-defaults --socket="$1/mysqld.sock" -e 'SELECT 1'
}

# start_dbd: slurmdbd (on the database at ${DB_PORT}) with the password in ${DB_DIR}/password;
# waits until it takes connections.
start_dbd() {
    local pass
    read -r pass <"${DB_DIR}/password"
    (
        umask 077
        render_slurmdbd_conf "${pass}" >"${DBD_CONF}.hpctrain-tmp"
    )
    mv -f "${DBD_CONF}.hpctrain-tmp" "${DBD_CONF}"
    detached "${DAEMON_ENV[@]}" "${RELEASE_EXEC[@]}" slurmdbd </dev/null >>"${STATE_DIR}/log/slurmdbd.stdout" 2>&1 || return 1
    retry 100 bash -c "exec 3<>/dev/tcp/${HOST_IP}/${DBD_PORT}" || return 1
    # (and it is ours: a slurmdbd that finds the port taken exits at once)
    pid_alive "${STATE_DIR}/run/slurmdbd.pid" slurmdbd
}

# stop_pid PIDFILE COMM: SIGTERM to it, and wait (at most 10 s) until it is gone.
stop_pid() {
    local pid
    pid_alive "$1" "$2" || return 0
    read -r pid <"$1"
    kill -TERM "${pid}"
    retry 100 eval "! running ${pid}"
}

# build_template: ${DB_DIR}.template, a database with slurmdbd's tables and this cluster
# registered (sacctmgr, which brings the account and user root), made once (~2 s) and copied at
# every cold start (~0.1 s): each start gets an empty job history that way, at a fraction of
# the time of making one.
build_template() {
    local pass
    rm -rf "${DB_DIR}" "${DB_DIR}.template"
    install -d -o mysql -g mysql -m 700 "${DB_DIR}"
    mariadb-install-db --no-defaults --user=mysql --datadir="${DB_DIR}/data" --skip-test-db \
        --innodb-log-file-size=8M >>"${STATE_DIR}/log/mariadb.stdout" 2>&1 || return 1
    start_db "${DB_DIR}" || return 1
    pass=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
    (umask 077 && printf '%s\n' "${pass}" >"${DB_DIR}/password")
    mariadb --no-defaults --socket="${DB_DIR}/mysqld.sock" -e "CREATE USER 'slurm'@'127.0.0.1'
        IDENTIFIED BY '${pass}'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'" || return 1
    start_dbd || return 1
    retry 100 "${RELEASE_EXEC[@]}" sacctmgr -i add cluster "${CLUSTER}" || return 1
    stop_pid "${STATE_DIR}/run/slurmdbd.pid" slurmdbd
    stop_pid "${DB_DIR}/mariadbd.pid" mariadbd
    rm -f "${DB_DIR}/mysqld.sock"
    mv "${DB_DIR}" "${DB_DIR}.template"
}

# start_accounting: MariaDB with an empty job history (a copy of the template), slurmdbd on it.
# Needs the bridge's address (slurmdbd is reached there) and slurm.conf; run beside the
# machines' setup.
start_accounting() {
    if [[ -e ${DBD_CONF} ]] && ! grep -qxF "${MARKER}" "${DBD_CONF}"; then
        echo "up.sh: error: ${DBD_CONF} exists and was not written by up.sh (no marker line); move it away" >&2
        return 1
    fi
    # (one left running by a down.sh that did not know it)
    stop_pid "${DB_DIR}/mariadbd.pid" mariadbd
    [[ -s ${DB_DIR}.template/password ]] || build_template || return 1
    rm -rf "${DB_DIR}"
    cp -a "${DB_DIR}.template" "${DB_DIR}"
    start_db "${DB_DIR}" || return 1
    start_dbd
}

# accounting_healthy: both daemons run.
accounting_healthy() {
    pid_alive "${DB_DIR}/mariadbd.pid" mariadbd && pid_alive "${STATE_DIR}/run/slurmdbd.pid" slurmdbd
}

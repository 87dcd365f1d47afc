# shellcheck shell=bash
# The test cluster's REST way in (sourced by up.sh): slurmrestd with JWT auth, as a site without
# Slurm's client tools or ssh offers it (hpctrain's `rest:` site key, backends/slurm/rest.py).
#
#   jwt key   ${JWT_KEY} (32 random bytes, mode 600, made once and kept across restarts):
#             slurm.conf and slurmdbd.conf name it (AuthAltTypes=auth/jwt), so that
#             `scontrol token` signs tokens slurmctld accepts
#   slurmrestd  http://127.0.0.1:${REST_PORT}, rest_auth/jwt only, run as the unprivileged user
#             nobody (slurmrestd refuses root and SlurmUser); SLURM_JWT=daemon makes it speak
#             auth/jwt to slurmctld with each request's token. Its pid file and log are in
#             rest/ (slurmrestd.pid, slurmrestd.log); down.sh stops it.
#   a token   `scontrol token username=root lifespan=600` (as root on the host); clients send it
#             as X-SLURM-USER-TOKEN
# See README.md ("REST").

readonly JWT_KEY=${STATE_DIR}/jwt_hs256.key
readonly REST_PORT=6820
readonly REST_USER=nobody
# Its pid file and log live here, not in run/ and log/, which a cold start wipes and rotates
# (by any tree's up.sh): a slurmrestd that outlives a restart stays found.
readonly REST_DIR=${STATE_DIR}/rest

# The key must exist before slurmctld and slurmdbd read their configuration: made here, when
# up.sh sources this file (a no-op once it exists).
if [[ ! -s ${JWT_KEY} && ${EUID} -eq 0 ]]; then
    mkdir -p "${STATE_DIR}"
    (umask 077 && head -c 32 /dev/urandom >"${JWT_KEY}.tmp") && mv -f "${JWT_KEY}.tmp" "${JWT_KEY}"
fi

# slurm.conf's and slurmdbd.conf's JWT lines: only the 22.05 cluster runs slurmrestd (the 24.11
# root has no auth/jwt plugin, without which its daemons would not start).
if [[ -z ${SUFFIX} ]]; then
    JWT_LINES="AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=${JWT_KEY}"
else
    JWT_LINES=''
fi
# shellcheck disable=SC2034 # used by up.sh and accounting.sh, which source this
readonly JWT_LINES

# ensure_rest: one live slurmrestd on 127.0.0.1:${REST_PORT}; started when missing (~0.1 s),
# never restarted when it runs (it connects to slurmctld per request, so a cluster restart
# does not concern it).
ensure_rest() {
    local pidfile=${REST_DIR}/slurmrestd.pid
    pid_alive "${pidfile}" slurmrestd && return 0
    mkdir -p "${REST_DIR}"
    # detached (accounting.sh): no inherited descriptor, or slurmrestd would hold the caller's
    # locks (/run/hpctrain-cluster.lock, up.sh's state lock) for its life; and no `&`: a
    # background job's shell would stay, holding them, as slurmrestd's parent. setsid -f forks
    # the new session and returns at once; in it the shell writes its own pid, then it, env
    # and setpriv exec in turn: the pid file holds slurmrestd's pid.
    # shellcheck disable=SC2016 # $$ and $@ are that shell's
    detached "${DAEMON_ENV[@]}" setsid -f bash -c 'echo "$$" >"$0" && exec "$@"' "${pidfile}" \
        env SLURM_JWT=daemon setpriv --reuid="${REST_USER}" --regid=nogroup --clear-groups \
        /usr/sbin/slurmrestd -f "${CONF}" -a rest_auth/jwt -s openapi/v0.0.38 "127.0.0.1:${REST_PORT}" \
        </dev/null >>"${REST_DIR}/slurmrestd.log" 2>&1
    local tries=50
    while ((tries-- > 0)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/${REST_PORT}") 2>/dev/null; then
            pid_alive "${pidfile}" slurmrestd && return 0
        fi
        sleep 0.1
    done
    echo "up.sh: error: slurmrestd did not listen on 127.0.0.1:${REST_PORT}" >&2
    tail -n 15 "${REST_DIR}/slurmrestd.log" >&2
    return 1
}

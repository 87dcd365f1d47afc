#!/usr/bin/env bash
# Run one container as (part of) a Slurm task so that Slurm's signals reach the container's
# process and a cancelled or preempted job leaves no container behind. Reference recipe for the
# test cluster (see README.md, "Podman on the nodes", for why plain `podman run` is not enough).
#
# Usage:  tests/cluster/podman-task.sh [PODMAN-RUN-OPTIONS...] IMAGE [COMMAND [ARGS...]]
#   e.g.  srun tests/cluster/podman-task.sh "${HPCT_PODMAN_RUN_OPTS[@]}" localhost/hpctrain-test:latest \
#             /work/main/.venv/bin/python train.py
#
# - adds: --runtime runc --cgroup-manager=cgroupfs (global), --sig-proxy=false,
#   --log-driver=passthrough (the container writes straight into the task's stdout/stderr, so
#   its output survives `podman run` being killed), --name hpct-JOB-STEP-TASK (a container of
#   the same name left by an earlier run is removed first).
# - SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 received by this script are sent to the
#   container's main process with `podman kill --signal`; the script then waits for the
#   container to exit, removes it and exits with its exit status.
# - A container that ignores SIGTERM is still left running when Slurm SIGKILLs this script
#   (conmon and the container are outside Slurm's process tracking): use --init or a handler.
set -uo pipefail

PODMAN=(podman --runtime runc --cgroup-manager=cgroupfs)
name=hpct-${SLURM_JOB_ID:-nojob}-${SLURM_STEP_ID:-batch}-${SLURM_PROCID:-0}

# shellcheck disable=SC2317  # called from the traps
forward() {
    "${PODMAN[@]}" kill --signal "$1" "${name}" >/dev/null 2>&1 ||
        echo "podman-task.sh: could not send SIG$1 to container ${name}" >&2
}
for sig in TERM INT HUP USR1 USR2; do
    # shellcheck disable=SC2064  # the signal name is meant to expand now
    trap "forward ${sig}" "${sig}"
done

"${PODMAN[@]}" rm --force --ignore "${name}" >/dev/null 2>&1 || true
"${PODMAN[@]}" run --sig-proxy=false --log-driver=passthrough --name "${name}" "$@" &
run_pid=$!

# `podman wait` returns the exit status once the container has stopped; a signal that this
# script traps interrupts it (and Slurm's signals may kill it): wait again.
until "${PODMAN[@]}" container exists "${name}"; do
    if ! kill -0 "${run_pid}" 2>/dev/null; then
        wait "${run_pid}"
        exit $? # podman run failed before the container existed
    fi
    sleep 0.1
done
while :; do
    if status=$("${PODMAN[@]}" wait "${name}" 2>/dev/null) && [[ ${status} =~ ^-?[0-9]+$ ]]; then
        break
    fi
    if ! "${PODMAN[@]}" container exists "${name}"; then
        # Removed meanwhile (by `podman run` itself): its exit status is podman run's.
        wait "${run_pid}"
        exit $?
    fi
done
wait "${run_pid}" 2>/dev/null || true
"${PODMAN[@]}" rm --force --ignore "${name}" >/dev/null 2>&1 || true
exit "${status}"

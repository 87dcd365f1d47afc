"""Run one task's container (Podman or Docker) so that the step's signals reach every process
in it and no container outlives the task. Runs on the host, one per task:

    python3 RUN_DIR/rank container podman [GLOBAL-OPTIONS...] -- [RUN-OPTIONS...] IMAGE CMD...

Why not plain `srun podman run` (measured on the local cluster, tests/cluster/README.md):
Slurm sends SIGCONT then SIGTERM to every process of the step within microseconds; Podman's
signal proxy forwards SIGCONT by starting `runc kill`, which Slurm's SIGTERM kills, and then
drops the SIGTERM: the container never sees it. After KillWait Slurm SIGKILLs `podman run`, but
conmon and the container were reparented out of the step and keep running.

So: `podman run --rm --sig-proxy=false --log-driver=passthrough --name hpct-JOB-STEP-TASK …`
(the container writes straight into the task's stdout/stderr, so its output survives `podman
run`), and this process, which Slurm does signal, sends each signal it gets to every process of
the container — found from the container's host PID through /proc, with system calls only, so
that nothing it starts can be killed by the same burst — like Slurm signals every process of a
step without a container (torchrun's agent and the ranks alike: see hpctrain/job/preemption.py). After
TERM or INT, whatever still runs `kill_after` seconds later (Slurm's KillWait minus 2 s) is
SIGKILLed, so the container is gone before Slurm SIGKILLs this process; `--rm` removes it.
The container's init (`--init`: catatonit, tini) is left out: it passes every signal on to its
child, torchrun's agent, which would get SIGTERM twice (seen on a real preemption: the agent
"closing" its ranks twice), and torch's handler raises on the second one inside the agent's
wait for its saving ranks: the agent exits, the init with it, and the kernel kills the ranks.
A container of the same name left by an earlier run is removed first.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGQUIT)
STOPPING = (signal.SIGTERM, signal.SIGINT)


def container_name() -> str:
    env = os.environ
    job = env.get("SLURM_JOB_ID") or env.get("HPCTRAIN_JOB_ID") or str(os.getpid())
    return "hpct-{}-{}-{}".format(job, env.get("SLURM_STEP_ID", "0"), env.get("SLURM_PROCID", "0"))


def node_name() -> str:
    import socket
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def kill_wait() -> int:
    """Slurm's KillWait (how long after SIGTERM it SIGKILLs the step), asked before any signal."""
    if not os.environ.get("SLURM_JOB_ID"):
        return 12
    from .. import tools
    try:  # bounded: read as it comes, stopped past the cap
        out = tools.run(["scontrol", "show", "config"], timeout=20,
                        limit=4 << 20).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.SubprocessError):
        return 30
    m = re.search(r"^KillWait\s*=\s*(\d+)", out, re.M)
    return int(m.group(1)) if m else 30


def descendants(root: int) -> list[int]:
    """root and every process below it, from /proc (parents first)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] != b"Z"
    except OSError:
        return False


class Supervisor:
    def __init__(self, command: list[str], run_args: list[str]):
        self.command = command
        self.run_args = run_args
        self.name = container_name()
        self.pid = 0  # the container's main process on the host
        self.init = "--init" in run_args  # its main process is an init that forwards signals
        self.stop_at = None
        self.kill_after = max(1, kill_wait() - 2)

    def tool(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*self.command, *args], capture_output=True, text=True)

    def signal_all(self, sig: int) -> None:
        if not self.pid:
            return
        denied = False
        tree = descendants(self.pid)
        if self.init and sig != signal.SIGKILL:
            tree = [pid for pid in tree if pid != self.pid]  # the init itself
        for pid in tree:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
            except PermissionError:
                denied = True
        if denied:  # e.g. Docker's root-owned processes: the runtime's own kill reaches PID 1
            self.tool("kill", "--signal", str(int(sig)), self.name)

    def on_signal(self, sig: int, _frame) -> None:
        self.signal_all(sig)
        if sig in STOPPING and self.stop_at is None:
            self.stop_at = time.monotonic() + self.kill_after

    def run(self) -> int:
        self.tool("rm", "--force", self.name)
        for sig in FORWARDED:
            signal.signal(sig, self.on_signal)
        # Podman's passthrough driver hands the task's own stdout/stderr to the container;
        # Docker has none (its attached client relays the output).
        logs = [] if os.path.basename(self.command[0]) == "docker" else ["--log-driver=passthrough"]
        proc = subprocess.Popen([*self.command, "run", "--rm", "--sig-proxy=false", *logs,
                                 "--name", self.name,
                                 "--label", f"hpctrain.job={os.environ.get('SLURM_JOB_ID', '')}",
                                 # (`attach` finds this node's: a runtime's storage can be shared)
                                 "--label", f"hpctrain.node={node_name()}",
                                 *self.run_args])
        while not self.pid and proc.poll() is None:
            out = self.tool("inspect", "--format", "{{.State.Pid}}", self.name).stdout.strip()
            if out.isdigit() and int(out) > 0:
                self.pid = int(out)
            else:
                time.sleep(0.1)
        while True:
            status = proc.poll()
            # Only the container's own end counts: a real preemption SIGTERMs `podman run` too
            # (it is a process of the step), which then exits at once with a status of its own
            # while the ranks are still saving; leaving here would SIGKILL them unsaved.
            if status is not None and (not self.pid or not alive(self.pid)):
                break
            if self.stop_at is not None and time.monotonic() > self.stop_at:
                print(f"hpctrain: container {self.name} still runs {self.kill_after} s after "
                      "the stop signal: killing it", file=sys.stderr, flush=True)
                self.signal_all(signal.SIGKILL)
                self.stop_at = float("inf")
            try:
                proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
        if status < 0:
            status = 128 - status
        if self.pid and alive(self.pid):
            self.signal_all(signal.SIGKILL)
        self.tool("rm", "--force", self.name)
        return status


def main(args: list[str]) -> int:
    if "--" not in args or args.index("--") == 0:
        print("usage: rank container RUNTIME [OPTIONS...] -- [RUN-OPTIONS...] IMAGE CMD...",
              file=sys.stderr)
        return 2
    i = args.index("--")
    return Supervisor(args[:i], args[i + 1:]).run()

"""Shared by the ssh-backend tests: the cluster's sshds as a lab's hosts (site locallab), and
what a test looks at on those hosts (their processes, their own directories)."""
from __future__ import annotations

import glob
import json
import os
import re
import shlex
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import yaml

from tests.conftest import ROOT

CLUSTER_DIR = ROOT / "tests" / "cluster"
SSH_CONFIG = "/var/lib/hpctrain-localcluster/ssh/config"
LAB = ROOT / "site_configs" / "locallab.yaml"
NS_DIR = "/run/hpctrain-localcluster/ns"


def on_host(host: str, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """A command on a cluster machine over its real sshd (the cluster's own client config, no
    shared connection: nothing of hpctrain's)."""
    return subprocess.run(["ssh", "-F", SSH_CONFIG, "-o", "ControlPath=none", host, command],
                          capture_output=True, text=True, timeout=timeout)


def leftovers(run_dir: Path, hosts=("node5", "node6")) -> dict[str, list[str]]:
    """What `ps` shows on each host that names the run directory (processes of the run)."""
    out = {}
    for host in hosts:
        proc = on_host(host, "ps -eo pid,args")
        assert proc.returncode == 0, proc.stderr
        out[host] = [line for line in proc.stdout.splitlines() if str(run_dir) in line]
    return out


# The lab's hosts' addresses (site locallab: the cluster's side nodes node5..node7).
LAB_ADDRESSES = {"10.231.0.15", "10.231.0.16", "10.231.0.17"}


def _peers(pid: str) -> set[str]:
    """The IPv4 addresses a process has TCP connections to (its own network namespace's table):
    an ssh master's title names only its socket, not its host."""
    try:
        inodes = {os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1] for fd in os.listdir(f"/proc/{pid}/fd")}
        rows = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return set()
    peers = set()
    for row in rows:
        fields = row.split()
        if fields[9] in inodes:
            peers.add(".".join(str(b) for b in reversed(bytes.fromhex(fields[2].split(":")[0]))))
    return peers


def close_connections() -> None:
    """Ends the shared ssh connections (ControlMaster) of this user's hpctrain to the lab's
    hosts, so that the next command really connects (a test of what a host answers must not ride
    on an old connection). Only those: the directory is shared with the Slurm tier's connections
    to the login node, in use at the same time, and ending one of those fails that tier's command
    with a silent ssh exit 255."""
    for sock in glob.glob(f"/tmp/hpctrain-ssh-{os.getuid()}/*"):
        check = subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "check", "x"],
                               capture_output=True, text=True, timeout=30)
        master = re.search(r"pid=(\d+)", check.stderr + check.stdout)
        if master and _peers(master.group(1)) & LAB_ADDRESSES:
            subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "x"],
                           capture_output=True, timeout=30)


def lab_site(directory: Path, name: str, **changes) -> Path:
    """A copy of the locallab profile under another name, with top-level keys changed (a key
    given None is removed); in `directory`, which the test puts on $HPCTRAIN_SITE_PATH."""
    doc = yaml.safe_load(LAB.read_text())
    doc["name"] = name
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def job_log(run_dir: Path) -> str:
    path = run_dir / "logs" / "job.out"
    return path.read_text(errors="replace") if path.exists() else ""


def status_of(cli, ref) -> dict:
    return json.loads(cli("status", str(ref), "--json").stdout)


def wait_done(cli, ref, timeout: float = 600) -> dict:
    """`hpctrain status` until the run has ended (what a user would poll)."""
    deadline = time.monotonic() + timeout
    st: dict = {}
    while time.monotonic() < deadline:
        st = status_of(cli, ref)
        if st["state"]["done"]:
            return st
        time.sleep(1)
    cli("cancel", str(ref), check=False)
    raise AssertionError(f"run {ref} did not end within {timeout} s: {st.get('state')}")


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def netns(host: str) -> list[str]:
    return ["nsenter", f"--net=/run/netns/hpct-{host}"] if host == "login" else \
        ["nsenter", f"--net=/run/netns/hpct-node{host.removeprefix('node')}"]


@contextmanager
def ip_rule(host: str, rule: list[str], priority: int):
    """An `ip rule` in one machine's network namespace for the duration of the block."""
    subprocess.run(netns(host) + ["ip", "rule", "add", *rule, "priority", str(priority)], check=True)
    try:
        yield
    finally:
        subprocess.run(netns(host) + ["ip", "rule", "del", "priority", str(priority)], check=True)


@contextmanager
def sshd_stopped(host: str):
    subprocess.run(["bash", str(CLUSTER_DIR / "node-sshd.sh"), host, "stop", "--quiet"], check=True)
    try:
        yield
    finally:
        subprocess.run(["bash", str(CLUSTER_DIR / "node-sshd.sh"), host, "start", "--quiet"],
                       check=True)


@contextmanager
def own_disks(base: Path, hosts=("node5", "node6")):
    """`base` is, on each host, a directory of that host alone (a bind mount in the host's own
    mount namespace), as on workstations without a shared filesystem; this machine, which
    submits, keeps the real one. Yields {host: the directory that host writes into}."""
    disks = {h: base.parent / f"{base.name}-disk-{h}" for h in hosts}
    base.mkdir(parents=True, exist_ok=True)
    mounted = []
    try:
        for host, disk in disks.items():
            disk.mkdir(parents=True, exist_ok=True)
            subprocess.run(["nsenter", f"--mount={NS_DIR}/{host}.mnt", "mount", "--bind",
                            str(disk), str(base)], check=True)
            mounted.append(host)
        yield disks
    finally:
        for host in mounted:
            _unmount(host, base)


def _unmount(host: str, base: Path, timeout: float = 30) -> None:
    """Unmount the host's own `base`, once what the test's run left there has ended: a process
    that is going away (a stop's grace, an ssh session closing) can hold it a moment longer.
    Still busy after `timeout`: the error names the processes whose directory is there."""
    deadline = time.monotonic() + timeout
    while True:
        proc = subprocess.run(["nsenter", f"--mount={NS_DIR}/{host}.mnt", "umount", str(base)],
                              capture_output=True, text=True)
        if proc.returncode == 0:
            return
        if time.monotonic() > deadline:
            holders = []
            for entry in Path("/proc").iterdir():
                try:
                    cwd = os.readlink(entry / "cwd")
                    args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if cwd == str(base) or cwd.startswith(str(base) + "/"):
                    holders.append(f"{entry.name} (cwd {cwd}): {args[:200]}")
            raise AssertionError(f"cannot unmount {base} on {host}: {proc.stderr.strip()}; "
                                 f"processes there: {holders or 'none found by cwd'}")
        time.sleep(0.5)


def quoted(words) -> str:
    return shlex.join(str(w) for w in words)

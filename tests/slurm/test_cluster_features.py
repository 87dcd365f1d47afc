"""The local test cluster's machinery, exercised for real (tests/cluster/README.md):
partition-priority preemption, count-only GRES GPUs, a node whose own name resolves to
loopback, an sshd per node, a login node and a laptop without Slurm, Podman in job steps, Lmod
under `set -euo pipefail`, accounting (sacct).
Each test checks the facts the README states, so that features built on them can trust them."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, wait_for_job


CLUSTER_DIR = ROOT / "tests" / "cluster"
STATE_DIR = Path("/var/lib/hpctrain-localcluster")
IMAGE = "localhost/hpctrain-test:latest"
PODMAN = "podman --runtime runc --cgroup-manager=cgroupfs"
MODULEFILES = CLUSTER_DIR / "modulefiles"
LMOD_INIT = "/usr/share/lmod/lmod/init/bash"
NODE_IP = {f"node{i}": f"10.231.0.{10 + i}" for i in range(1, 5)}  # the tests use node1..node4


def n_nodes() -> int:
    return int(run("sinfo", "-h", "-p", "debug", "-o", "%D").stdout)


def node_range(n: int) -> str:
    return "node1" if n == 1 else f"node[1-{n}]"


def run(*cmd, timeout: float = 120, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"{shlex.join(map(str, cmd))} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def sbatch(*args) -> str:
    return run("sbatch", "--parsable", *args).stdout.strip().split(";")[0]


def script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def ssh_info(cluster) -> dict[str, str]:
    out = run("bash", CLUSTER_DIR / "ssh-info.sh").stdout
    info = {}
    for line in out.splitlines():
        key, value = line.split("=", 1)
        info[key] = shlex.split(value)[0] if value else ""
    return info


def ssh(info, host, *cmd, timeout: float = 30, check: bool = True, opts=()):
    return run("ssh", "-F", info["HPCTRAIN_CLUSTER_SSH_CONFIG"], *opts, host, *cmd,
               timeout=timeout, check=check)


def on_laptop(*cmd, timeout: float = 60, check: bool = True, **kw):
    return run("bash", CLUSTER_DIR / "on-laptop.sh", *cmd, timeout=timeout, check=check, **kw)


# ----------------------------------------------------------------------------- packages


def test_system_packages_are_installed(cluster):
    for tool in ("sshd", "ssh", "ssh-keygen", "podman", "runc", "conmon", "catatonit", "rsync",
                 "nsenter", "unshare", "flock", "shellcheck"):
        assert shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"), tool
    assert Path(LMOD_INIT).is_file()
    assert Path("/etc/profile.d/lmod.sh").is_file()


@pytest.mark.alone
def test_up_repairs_without_restart(cluster):
    ctld_pid = (STATE_DIR / "run" / "slurmctld.pid").read_text().strip()
    # (what the nodes were when up.sh looked, should it restart: a state it does not accept)
    nodes = run("sinfo", "-h", "-N", "-o", "%N %t %E").stdout
    run(CLUSTER_DIR / "node-sshd.sh", "node3", "stop")
    proc = run("bash", CLUSTER_DIR / "up.sh")
    assert "already up" in proc.stdout, proc.stdout + nodes
    assert run(CLUSTER_DIR / "node-sshd.sh", "node3", "status").returncode == 0
    assert (STATE_DIR / "run" / "slurmctld.pid").read_text().strip() == ctld_pid  # no restart
    # The nodes' hosts files follow /etc/hosts (with up.sh's block: login, laptop, the nodes).
    hosts = Path("/etc/hosts").read_text()
    for name in ("login", "laptop", "node1"):
        assert re.search(rf"^\S+ {name}$", hosts, re.M), name
    for i in range(1, n_nodes() + 1):
        assert (STATE_DIR / "hosts" / f"node{i}").read_text() == hosts


@pytest.mark.alone
def test_up_rebuilds_a_missing_image_without_restart(cluster):
    ctld_pid = (STATE_DIR / "run" / "slurmctld.pid").read_text().strip()
    run(*PODMAN.split(), "rmi", "--force", IMAGE)
    proc = run("bash", CLUSTER_DIR / "up.sh")
    assert f"built podman image {IMAGE}" in proc.stdout, proc.stdout
    assert run(*PODMAN.split(), "image", "exists", IMAGE).returncode == 0
    assert (STATE_DIR / "run" / "slurmctld.pid").read_text().strip() == ctld_pid


# ----------------------------------------------------------------------------- accounting


def test_sacct_answers_for_the_clusters_jobs(cluster, tmp_path):
    """slurmdbd on MariaDB (tests/cluster/accounting.sh): the cluster and root's association are
    registered, and sacct reports a finished job with its steps (JobAcctGatherType linux) and
    asks for GPUs among the TRES."""
    config = run("scontrol", "show", "config").stdout
    assert re.search(r"^AccountingStorageType\s*=\s*accounting_storage/slurmdbd$", config, re.M), config
    assert re.search(r"^AccountingStorageTRES\s*=.*gres/gpu", config, re.M), config
    assoc = run("sacctmgr", "-n", "-P", "show", "assoc", "format=cluster,account,user").stdout.split()
    assert "localcluster|root|root" in assoc, assoc
    job = sbatch("-N1", "-o", tmp_path / "out", "--wrap", "srun true")
    deadline = time.monotonic() + 60
    while True:
        rows = run("sacct", "-n", "-P", "-j", job, "-o", "JobID,State,ElapsedRaw,AllocTRES").stdout.split()
        if rows and rows[0].split("|")[1] == "COMPLETED" and any(r.startswith(f"{job}.0|") for r in rows):
            break
        assert time.monotonic() < deadline, rows
        time.sleep(0.3)
    fields = rows[0].split("|")
    assert fields[0] == job and fields[2].isdigit() and "cpu=" in fields[3], rows
    assert {r.split("|")[0] for r in rows} >= {job, f"{job}.batch", f"{job}.0"}, rows


# ----------------------------------------------------------------------------- preemption


def test_partitions_and_preemption_config(cluster):
    config = run("scontrol", "show", "config").stdout
    assert re.search(r"^PreemptType\s*=\s*preempt/partition_prio$", config, re.M), config
    assert re.search(r"^PreemptMode\s*=\s*REQUEUE$", config, re.M)
    assert re.search(r"^JobRequeue\s*=\s*1$", config, re.M)
    debug = run("scontrol", "-o", "show", "partition", "debug").stdout
    high = run("scontrol", "-o", "show", "partition", "high").stdout
    assert "Default=YES" in debug and "PriorityTier=1 " in debug and f"GraceTime={grace_time()} " in debug, debug
    assert 10 <= grace_time() <= 30, debug  # time to save a small model, not a wait
    assert "Default=NO" in high and "PriorityTier=2 " in high, high
    nodes = f"Nodes={node_range(n_nodes())} "
    assert nodes in debug and nodes in high, (debug, high)
    # Jobs that name no partition run on debug, as before.
    job = sbatch("-o", "/dev/null", "--wrap", "true")
    assert wait_for_job(job)["Partition"] == "debug"


def grace_time() -> int:
    """The debug partition's GraceTime (tests/cluster/up.sh), in seconds."""
    debug = run("scontrol", "-o", "show", "partition", "debug").stdout
    return int(re.search(r"\bGraceTime=(\d+)\b", debug).group(1))


def _events(path: Path) -> list[tuple[float, str]]:
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        stamp, _, what = line.partition(" ")
        try:
            events.append((float(stamp), what))
        except ValueError:
            events.append((float("inf"), line))  # unparsable: last in the timeline
    return sorted(events)


VICTIM = """#!/bin/bash
#SBATCH -p debug -N2 --ntasks-per-node=1 -w node1,node2 --open-mode=append -o {d}/victim.out
# Time stamps from bash's $EPOCHREALTIME: a `date` child would be in the step and get the
# signals too.
D={d}
run=${{SLURM_RESTART_COUNT:-0}}
log() {{ echo "$EPOCHREALTIME run=$run $*" >> "$D/events"; }}
for s in TERM CONT USR1 USR2 INT HUP; do trap "log batch got $s" $s; done
log batch start restart=${{SLURM_RESTART_COUNT-unset}}
if [[ $run == 0 ]]; then
    # A step that notes every signal and keeps running (a trainer that ignores SIGTERM).
    srun bash -c 'h=$(hostname); log() {{ echo "$EPOCHREALTIME run=0 $*" >> {d}/events; }}
        for s in TERM CONT USR1 USR2 INT HUP; do trap "log step-$h got $s" $s; done
        log step-$h ready
        while :; do echo $EPOCHREALTIME >> {d}/alive-$h; sleep 0.1; done' &
    while :; do sleep 0.1 & wait $!; done
fi
log batch second run done
"""


def test_high_partition_preempts_debug_job_sigterm_then_requeue(cluster, tmp_path):
    """A 'high' job that needs the nodes preempts the 'debug' job: SIGTERM (with SIGCONT) to the
    tasks of its steps at once, nothing to the batch shell; at the end of GraceTime SIGCONT +
    SIGTERM to everything, SIGKILL KillWait=5 s later, requeue; the high job runs; the requeued
    job runs again with SLURM_RESTART_COUNT=1 and completes."""
    events = tmp_path / "events"
    victim = sbatch(script(tmp_path / "victim.sh", VICTIM.format(d=tmp_path)))
    deadline = time.monotonic() + 60
    while sum("ready" in e for _, e in _events(events)) < 2:
        assert time.monotonic() < deadline, _events(events)
        time.sleep(0.2)

    t_high = time.time()
    high = sbatch("-p", "high", "--exclusive", "-N2", "-w", "node1,node2", "-o", tmp_path / "high.out",
                  "--wrap", f'echo "$(date +%s.%N) high start" >> {events}; sleep 3; '
                            f'echo "$(date +%s.%N) high end" >> {events}')
    info = wait_for_job(victim, timeout=180)
    high_info = wait_for_job(high, timeout=30)
    ev = _events(events)
    timeline = "\n".join(f"{t - t_high:7.2f} {e}" for t, e in ev)
    print(timeline)

    def first(pattern: str) -> float:
        hits = [t for t, e in ev if re.search(pattern, e)]
        assert hits, f"no event matching {pattern!r}\n{timeline}"
        return hits[0]

    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", info
    assert high_info["JobState"] == "COMPLETED"
    # At once: SIGTERM and SIGCONT to the step's tasks on every node, nothing to the batch shell.
    term1 = first(r"run=0 step-node1 got TERM")
    assert first(r"run=0 step-node2 got TERM") - t_high < 5, timeline
    assert term1 - t_high < 5, timeline
    assert first(r"run=0 step-node1 got CONT") - t_high < 5, timeline
    assert not any("got USR" in e for _, e in ev), timeline  # no user signal
    # At the end of the grace time: the batch shell too (and the steps again).
    batch_term = first(r"run=0 batch got TERM")
    grace = grace_time()
    assert grace - 2 <= batch_term - term1 <= grace + 10, timeline
    assert first(r"run=0 batch got CONT") - batch_term < 1, timeline
    assert len([e for t, e in ev if "run=0 step-node1 got TERM" in e and t >= batch_term - 0.5]) >= 1
    # SIGKILL KillWait (5 s) after that: the tasks' heartbeats stop.
    # (appended, not rewritten: a SIGKILL between a truncation and its write left an empty file)
    last_alive = max(float((tmp_path / f"alive-{n}").read_text().split()[-1]) for n in ("node1", "node2"))
    assert 3 <= last_alive - batch_term <= 8, (last_alive - batch_term, timeline)
    # The high job ran after the preempted processes were gone, the requeued run after it.
    high_start, high_end = first(r"^high start"), first(r"^high end")
    assert high_start >= batch_term, timeline
    assert first(r"run=1 batch start restart=1") > high_end, timeline
    assert first(r"run=1 batch second run done") > high_end


def test_preempted_job_that_exits_is_not_requeued(cluster, tmp_path):
    """The trap a preemption handler must avoid: a job that ends by itself within GraceTime
    (exit 0 after SIGTERM) is COMPLETED, not requeued — the run would silently stop."""
    victim = sbatch("-p", "debug", "-N1", "-w", "node3", "-o", tmp_path / "v.out", "--wrap",
                    "srun bash -c 'trap \"exit 0\" TERM; touch " + str(tmp_path / "ready") +
                    "; while :; do sleep 0.1; done'; echo step-ended")
    deadline = time.monotonic() + 30
    while not (tmp_path / "ready").exists():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    high = sbatch("-p", "high", "--exclusive", "-w", "node3", "-o", "/dev/null", "--wrap", "true")
    info = wait_for_job(victim, timeout=60)
    wait_for_job(high, timeout=60)
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "0", info
    assert "step-ended" in (tmp_path / "v.out").read_text()


def test_preempted_job_requeues_itself_after_saving(cluster, tmp_path):
    """What works instead: on SIGTERM the job saves, then `scontrol requeue $SLURM_JOB_ID`: the
    high job starts at once, the job runs again with SLURM_RESTART_COUNT=1."""
    body = f"""#!/bin/bash
#SBATCH -p debug -N1 -w node4 --open-mode=append -o {tmp_path}/v.out
if [[ -n ${{SLURM_RESTART_COUNT:-}} ]]; then echo "second run restart=$SLURM_RESTART_COUNT"; exit 0; fi
srun bash -c 'trap "echo saved; exit 0" TERM; touch {tmp_path}/ready; while :; do sleep 0.1; done'
scontrol requeue "$SLURM_JOB_ID"
sleep 30  # killed by the requeue
"""
    victim = sbatch(script(tmp_path / "v.sh", body))
    deadline = time.monotonic() + 30
    while not (tmp_path / "ready").exists():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    t0 = time.monotonic()
    high = sbatch("-p", "high", "--exclusive", "-w", "node4", "-o", "/dev/null", "--wrap", "true")
    high_info = wait_for_job(high, timeout=60)
    assert time.monotonic() - t0 < 10, "the high job waited for the grace time"
    info = wait_for_job(victim, timeout=90)
    out = (tmp_path / "v.out").read_text()
    assert high_info["JobState"] == "COMPLETED"
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", (info, out)
    assert "saved" in out and "second run restart=1" in out, out


# ----------------------------------------------------------------------------- GPUs (count-only GRES)


def test_nodes_have_four_gres_gpus_that_jobs_are_scheduled_on(cluster):
    """Each node's four GPUs are Slurm's (gres.conf: empty files): a step of 4 a node runs and
    sees them counted, with no device list; 5 a node is refused at once."""
    nodes = run("sinfo", "-h", "-N", "-p", "debug", "-o", "%N %G").stdout.split("\n")
    assert {line.split()[1] for line in nodes if line} == {"gpu:4"}, nodes
    assert "Gres=gpu:4" in run("scontrol", "show", "node", "node2").stdout
    assert re.search(r"^GresTypes\s*=\s*gpu$", run("scontrol", "show", "config").stdout, re.M)
    out = run("srun", "-p", "debug", "-N2", "--gpus-per-node=4", "bash", "-c",
              'echo "$SLURMD_NODENAME gpus=$SLURM_GPUS_ON_NODE cvd=${CUDA_VISIBLE_DEVICES-unset}"',
              timeout=60).stdout.split("\n")
    assert sorted(line.split(" ", 1)[1] for line in out if line) == ["gpus=4 cvd=unset"] * 2, out
    refused = run("srun", "-p", "debug", "-N1", "--gpus-per-node=5", "true", check=False, timeout=60)
    assert refused.returncode != 0
    assert "Requested node configuration is not available" in refused.stderr, refused.stderr


# ----------------------------------------------------------------------------- /etc/hosts per node


def _getent_on(node: str) -> str:
    out = run("srun", "-w", node, "-N1", "getent", "ahostsv4", "node1", timeout=60).stdout
    return out.split()[0]


def test_node_hosts_loopback_only_inside_that_node(cluster, ssh_info, tmp_path):
    try:
        run(CLUSTER_DIR / "node-hosts.sh", "node1", "loopback")
        assert run(CLUSTER_DIR / "node-hosts.sh", "node1", "status").stdout.strip() == "loopback"
        assert _getent_on("node1") == "127.0.1.1"
        assert _getent_on("node2") == NODE_IP["node1"]
        assert run("getent", "ahostsv4", "node1").stdout.split()[0] == NODE_IP["node1"]
        # ssh sessions live in the node's namespaces too.
        assert ssh(ssh_info, "node1", "getent ahostsv4 node1").stdout.split()[0] == "127.0.1.1"
        # Slurm keeps working in that state: a 2-node job whose batch host is node1.
        job = sbatch("-N2", "-w", "node1,node2", "-o", tmp_path / "out", "--wrap",
                     "srun bash -c 'echo $(hostname) $(getent ahostsv4 node1 | head -1)'")
        assert wait_for_job(job, timeout=60)["JobState"] == "COMPLETED"
        lines = sorted(" ".join(line.split()[:2]) for line in (tmp_path / "out").read_text().splitlines())
        assert lines == ["node1 127.0.1.1", "node2 10.231.0.11"], lines
    finally:
        run(CLUSTER_DIR / "node-hosts.sh", "node1", "restore")
    assert _getent_on("node1") == NODE_IP["node1"]
    assert _getent_on("node2") == NODE_IP["node1"]
    assert (STATE_DIR / "hosts" / "node1").read_text() == Path("/etc/hosts").read_text()


# ----------------------------------------------------------------------------- sshd per node


def test_ssh_config_reaches_each_machine(ssh_info):
    hosts = ssh_info["HPCTRAIN_CLUSTER_SSH_HOSTS"].split()
    every_node = len(set(run("sinfo", "-h", "-N", "-o", "%N").stdout.split()))  # side nodes too
    ssh_nodes = min(every_node, int(os.environ.get("HPCTRAIN_CLUSTER_SSH_NODES", "8")))
    assert hosts == [f"node{i}" for i in range(1, ssh_nodes + 1)] + ["login"], hosts
    for host in hosts:
        assert ssh(ssh_info, host, "hostname").stdout.strip() == host
    assert ssh(ssh_info, "node3", "hostname -I").stdout.split() == ["10.231.0.13"]


def test_ssh_with_key_and_known_hosts_only(ssh_info, tmp_path):
    known = tmp_path / "known_hosts"
    proc = run("ssh", "-i", ssh_info["HPCTRAIN_CLUSTER_SSH_KEY"], "-o", f"UserKnownHostsFile={known}",
               "-o", "StrictHostKeyChecking=accept-new", "-o", "BatchMode=yes",
               "-o", "ConnectTimeout=5", "root@10.231.0.12", "hostname")
    assert proc.stdout.strip() == "node2"
    # accepted and recorded (hashed: Debian's ssh_config says HashKnownHosts yes)
    assert "ssh-ed25519" in run("ssh-keygen", "-F", "10.231.0.12", "-f", known).stdout


def test_ssh_sixteen_parallel_sessions(ssh_info, tmp_path):
    """sshd holds 16 sessions at once (its MaxStartups does not refuse or serialise them): each
    session checks in, then waits until all 16 have — which only happens if they overlap."""
    here = tmp_path / "in"
    here.mkdir()
    script = (f"touch {here}/$$; for _ in $(seq 600); do "
              f"[ $(ls {here} | wc -l) -ge 16 ] && break; sleep 0.1; done; "
              f"echo $(hostname) $(ls {here} | wc -l)")
    cmd = ["ssh", "-F", ssh_info["HPCTRAIN_CLUSTER_SSH_CONFIG"], "node1", script]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(16)]
    results = [p.communicate(timeout=90) + (p.returncode,) for p in procs]
    assert all(rc == 0 and out.split() == ["node1", "16"] for out, _, rc in results), results


def test_ssh_controlmaster_is_reused(ssh_info):
    # A short directory: the socket path (ControlPath + ssh's 17-character temporary suffix)
    # must fit a Unix socket's 107 bytes; pytest's tmp_path does not.
    cm_dir = tempfile.mkdtemp(prefix="hpct-cm-")
    opts = ("-o", "ControlMaster=auto", "-o", f"ControlPath={cm_dir}/%C", "-o", "ControlPersist=60")
    try:
        assert ssh(ssh_info, "node3", "hostname", opts=opts).stdout.strip() == "node3"
        check = ssh(ssh_info, "node3", opts=(*opts, "-O", "check"))
        assert "Master running" in check.stderr, check.stderr
        second = ssh(ssh_info, "node3", "hostname", opts=(*opts, "-v"))
        assert second.stdout.strip() == "node3"
        assert "mux_client_request_session" in second.stderr, second.stderr
        assert "Authenticating to" not in second.stderr  # no new connection
    finally:
        ssh(ssh_info, "node3", opts=(*opts, "-O", "exit"), check=False)
        shutil.rmtree(cm_dir, ignore_errors=True)


def test_ssh_fails_fast_when_a_node_sshd_is_stopped(ssh_info):
    try:
        run(CLUSTER_DIR / "node-sshd.sh", "node4", "stop")
        # Fast means refused, not waited out: with a connect timeout of 60 s, a connection that
        # hung (a dropped SYN, a half-up sshd) would take the full minute and say "timed out".
        start = time.monotonic()
        proc = ssh(ssh_info, "node4", "hostname", check=False, timeout=120,
                   opts=("-o", "ConnectTimeout=60"))
        took = time.monotonic() - start
        assert proc.returncode == 255 and "Connection refused" in proc.stderr, proc.stderr
        assert took < 30, took
    finally:
        run(CLUSTER_DIR / "node-sshd.sh", "node4", "start")
    assert ssh(ssh_info, "node4", "hostname").stdout.strip() == "node4"


# ----------------------------------------------------------------------------- login and laptop


def test_login_node_runs_slurm_commands(ssh_info, tmp_path):
    assert ssh(ssh_info, "login", "hostname").stdout.strip() == "login"
    job = ssh(ssh_info, "login", f"sbatch --parsable -o {tmp_path}/s.out --wrap 'sleep 60'").stdout.strip()
    assert job in ssh(ssh_info, "login", "squeue -h -o %i").stdout.split()
    ssh(ssh_info, "login", f"scancel {job}")
    assert wait_for_job(job, timeout=30)["JobState"] == "CANCELLED"


def test_laptop_has_no_slurm(cluster):
    assert on_laptop("hostname").stdout.strip() == "laptop"
    assert on_laptop("ls", "-A", "/etc/slurm").stdout == ""
    proc = on_laptop("sbatch", "--wrap", "true", check=False, env=dict(os.environ, SLURM_CONF="/etc/slurm/slurm.conf"))
    assert proc.returncode != 0
    assert "Could not establish a configuration source" in proc.stderr, proc.stderr
    # Its only route is to login: not to the controller, not to the nodes.
    for target in ("10.231.0.1/6817", "10.231.0.11/22"):
        proc = on_laptop("bash", "-c", f"exec 3<>/dev/tcp/{target}", check=False)
        assert proc.returncode != 0 and "Network is unreachable" in proc.stderr, proc.stderr


def test_submit_from_laptop_through_login(cluster, tmp_path):
    job = on_laptop("ssh", "login", f"sbatch --parsable -o {tmp_path}/out --wrap hostname").stdout.strip()
    assert re.fullmatch(r"\d+", job), job
    info = wait_for_job(job, timeout=60)
    assert info["JobState"] == "COMPLETED", info
    assert re.fullmatch(r"node\d+\n", (tmp_path / "out").read_text())


def test_laptop_reads_the_working_tree(cluster):
    proc = on_laptop("sh", "-c", "pwd; cat tests/cluster/README.md", cwd=ROOT)
    pwd, _, readme = proc.stdout.partition("\n")
    assert pwd == str(ROOT)
    assert readme == (CLUSTER_DIR / "README.md").read_text()


# ----------------------------------------------------------------------------- podman


def _podman_run_opts(extra: str = "") -> str:
    venv, pyhome = Path(sys.prefix), Path(sys.base_prefix)
    # Whatever else this interpreter imports from (a venv may extend its path with .pth files).
    more = sorted({p for p in map(Path, sys.path) if p.is_dir() and not any(
        p == d or d in p.parents for d in (Path("/usr"), pyhome, venv))})
    binds = " ".join(f"-v {p}:{p}:ro" for p in more)
    return (f"--network=host --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "
            f"-v /usr:/usr:ro -v /etc:/etc:ro -v {pyhome}:{pyhome}:ro -v {venv}:{venv}:ro {binds} {extra}")


def _containers(name_prefix: str) -> list[str]:
    out = run(*PODMAN.split(), "ps", "-a", "--format", "{{.Names}} {{.Status}}").stdout
    return [line for line in out.splitlines() if line.startswith(name_prefix)]


def test_podman_in_a_job_step_is_on_the_node_network(cluster, tmp_path):
    py = Path(sys.prefix) / "bin" / "python"
    step = script(tmp_path / "step.sh", f"""#!/bin/bash
set -euo pipefail
# A listener in node1's network namespace, on its loopback.
{py} -c 'import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 39517)); s.listen(); open("{tmp_path}/listening", "w").close()
c, _ = s.accept(); c.sendall(b"hello from node1 listener"); c.close()' &
until [[ -e {tmp_path}/listening ]]; do sleep 0.05; done
{PODMAN} run --rm --name hpct-net-$SLURM_JOB_ID {_podman_run_opts()} {IMAGE} \\
    {py} -c 'import torch, socket, subprocess
print("hostname", socket.gethostname())
print("ips", subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.strip())
s = socket.create_connection(("127.0.0.1", 39517)); print("listener", s.recv(100).decode())
print("torch", torch.__version__)'
wait
""")
    out = run("srun", "-w", "node1", "-N1", step, timeout=120).stdout
    assert "hostname node1\n" in out, out
    assert "ips 10.231.0.11\n" in out, out
    assert "listener hello from node1 listener\n" in out, out
    assert "torch " in out
    assert _containers("hpct-net-") == []


TRAPPER = """#!/bin/bash
for s in USR1 USR2 HUP INT; do trap "echo got $s >> {log}" $s; done
trap 'echo got TERM >> {log}; exit 143' TERM
echo "started as pid $$ on $(hostname)" >> {log}
while :; do sleep 0.1 & wait $!; done
"""


def test_podman_sig_proxy_forwards_term_and_usr2(cluster, tmp_path):
    log = tmp_path / "container.log"
    trapper = script(tmp_path / "trapper.sh", TRAPPER.format(log=log))
    # Podman enables its signal proxy only after the container has started: a signal sent
    # before that is lost (README.md). Send USR2 until it arrives (at most 10 tries), then TERM.
    # (Waiting for --log-level=debug's "Enabling signal proxying" instead makes podman run wait
    # 20 s for conmon at the end.)
    step = script(tmp_path / "step.sh", f"""#!/bin/bash
{PODMAN} run --rm --name hpct-sig-$SLURM_JOB_ID {_podman_run_opts(f"-v {tmp_path}:{tmp_path}")} \\
    {IMAGE} {trapper} &
pid=$!
until grep -q started {log} 2>/dev/null; do sleep 0.1; done
for try in 1 2 3 4 5 6 7 8 9 10; do
    kill -USR2 $pid; sleep 0.5
    grep -q "got USR2" {log} && break
done
echo "USR2 tries: $try"
kill -TERM $pid
wait $pid; echo "podman run exited $?"
""")
    out = run("srun", "-w", "node1", "-N1", step, timeout=120).stdout
    lines = log.read_text().splitlines()
    assert lines[0] == "started as pid 1 on node1" and lines[-1] == "got TERM", lines
    assert lines[1:-1] == ["got USR2"], (lines, out)  # delivered once, not lost at the end
    assert "podman run exited 143" in out, out
    assert _containers("hpct-sig-") == []


def _wait_for(path: Path, text: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while not (path.exists() and text in path.read_text()):
        assert time.monotonic() < deadline, f"{text!r} not in {path}"
        time.sleep(0.2)


def test_cancelled_job_with_podman_task_leaves_nothing(cluster, tmp_path):
    """scancel (SIGCONT+SIGTERM to the step, SIGKILL after KillWait) through
    tests/cluster/podman-task.sh: the container gets SIGTERM, finishes its handler, its output
    reaches the job's file, and no container is left."""
    body = ("echo started; trap 'echo got TERM; sleep 1; echo saved; exit 143' TERM; "
            "while :; do sleep 0.1 & wait $!; done")
    job = sbatch("-w", "node1", "-o", tmp_path / "out", "--wrap",
                 f"srun {CLUSTER_DIR}/podman-task.sh {_podman_run_opts()} {IMAGE} bash -c {shlex.quote(body)}")
    _wait_for(tmp_path / "out", "started")
    time.sleep(1)
    run("scancel", job)
    info = wait_for_job(job, timeout=60)
    out = (tmp_path / "out").read_text()
    assert info["JobState"] == "CANCELLED"
    assert "got TERM" in out and "saved" in out, out
    assert _containers(f"hpct-{job}-") == []


def test_cancelled_job_can_leave_a_container_running(cluster, tmp_path):
    """The leak README.md documents: `srun podman run --rm` whose container does not end on
    SIGTERM (here PID 1 is `sleep`, which ignores it). Slurm SIGKILLs `podman run` after
    KillWait; conmon and the container are not in Slurm's process tree and keep running."""
    name = f"hpct-leak-{os.getpid()}"
    job = sbatch("-w", "node2", "-o", tmp_path / "out", "--wrap",
                 f"srun {PODMAN} run --rm --name {name} {_podman_run_opts()} {IMAGE} sleep 300")
    deadline = time.monotonic() + 60
    while not _containers(name):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(1)
    try:
        run("scancel", job)
        assert wait_for_job(job, timeout=60)["JobState"] == "CANCELLED"
        time.sleep(1)
        left = _containers(name)
        assert len(left) == 1 and " Up " in f" {left[0]} ", left
    finally:
        run(*PODMAN.split(), "rm", "--force", "--time", "0", "--ignore", name, timeout=60)
    assert _containers(name) == []


# ----------------------------------------------------------------------------- Lmod


def test_lmod_good_module_in_a_set_u_job(cluster, tmp_path):
    job_script = script(tmp_path / "job.sh", f"""#!/bin/bash
#SBATCH -N1 -o {tmp_path}/out
set -euo pipefail
source {LMOD_INIT}
module use {MODULEFILES}
module load hpct-good
echo "HPCT_GOOD=$HPCT_GOOD"
echo "tool: $(hpct-good-tool)"
if module load hpct-broken; then echo "broken loaded"; else echo "broken failed rc=$?"; fi
echo "still HPCT_GOOD=$HPCT_GOOD, HPCT_BROKEN=${{HPCT_BROKEN-unset}}"
""")
    info = wait_for_job(sbatch(job_script), timeout=60)
    out = (tmp_path / "out").read_text()
    assert info["JobState"] == "COMPLETED", out
    assert "HPCT_GOOD=1.0\n" in out and "tool: hpct-good-tool\n" in out, out
    assert "broken failed rc=1\n" in out, out
    assert "this module always" in out  # LmodError's message, on stderr
    assert "still HPCT_GOOD=1.0, HPCT_BROKEN=unset" in out


LMOD_CASES = {
    # name: (shell code after `set -euo pipefail`, expected rc, expected text in output)
    "good": (f"source {LMOD_INIT}; module use {MODULEFILES}; module load hpct-good; echo ok=$HPCT_GOOD",
             0, "ok=1.0"),
    "unsetvar": (f"source {LMOD_INIT}; module use {MODULEFILES}; module load hpct-unsetvar; "
                 "echo ok=$HPCT_UNSETVAR", 0, "ok=loaded"),
    "broken": (f"source {LMOD_INIT}; module use {MODULEFILES}; module load hpct-broken; echo after",
               1, "hpct-broken/1.0: this module always"),
    "broken-guarded": (f"source {LMOD_INIT}; module use {MODULEFILES}; "
                       "module load hpct-broken || echo guarded=$?", 0, "guarded=1"),
    "tclunset": (f"source {LMOD_INIT}; module use {MODULEFILES}; module load hpct-tclunset",
                 1, 'can\'t read "env(HPCT_SURELY_UNSET)": no such variable'),
    "shellunset": (f"source {LMOD_INIT}; module use {MODULEFILES}; module load hpct-shellunset; echo after",
                   1, "HPCT_SURELY_UNSET: unbound variable"),
    "shellunset-guarded": (f"source {LMOD_INIT}; module use {MODULEFILES}; "
                           "module load hpct-shellunset || echo guarded; echo after", 1,
                           "HPCT_SURELY_UNSET: unbound variable"),
    "shellunset-set+u": (f"set +u; source {LMOD_INIT}; module use {MODULEFILES}; "
                         "module load hpct-shellunset; set -u; echo ok=$HPCT_SHELLUNSET", 0, "ok=1.0"),
    "profile-no-user": (f"unset USER LOGNAME; source /etc/profile.d/lmod.sh; module use {MODULEFILES}; "
                        "module load hpct-good; echo ok", 1, "LOGNAME: unbound variable"),
    "profile-user": (f"export USER=root; source /etc/profile.d/lmod.sh; module use {MODULEFILES}; "
                     "module load hpct-good; echo ok=$HPCT_GOOD", 0, "ok=1.0"),
}


def test_lmod_under_set_euo_pipefail_facts(cluster, tmp_path):
    """The facts README.md records, case by case, in a job step on a node."""
    lines = ["#!/bin/bash"]
    for name, (code, _, _) in LMOD_CASES.items():
        # Each case is a script file, like a job script (bash exits 1 on an unbound variable in a
        # script file, 127 under `bash -c`).
        case = script(tmp_path / f"{name}.sh", "#!/bin/bash\nset -euo pipefail\n" + code.replace("; ", "\n") + "\n")
        lines.append(f"{case} > {tmp_path}/{name}.out 2>&1; echo $? > {tmp_path}/{name}.rc")
    step = script(tmp_path / "cases.sh", "\n".join(lines) + "\n")
    run("srun", "-w", "node2", "-N1", step, timeout=120)
    for name, (_, rc, text) in LMOD_CASES.items():
        out = (tmp_path / f"{name}.out").read_text()
        assert int((tmp_path / f"{name}.rc").read_text()) == rc, (name, out)
        assert text in out, (name, out)
        if rc:
            assert "after" not in out.splitlines() and "guarded" not in out, (name, out)


# ----------------------------------------------------------------------------- down and other sizes


def _leftovers() -> list[str]:
    """What the 22.05 cluster's down.sh must remove (the 24.11 cluster's names, hpct1*,
    /run/hpctrain-localcluster-24.11, its own hosts block, are another cluster's, running)."""
    found = [f"netns {p.name}" for p in Path("/run/netns").glob("hpct-*")] if Path("/run/netns").exists() else []
    found += [f"link {p.name}" for p in Path("/sys/class/net").glob("hpct*")
              if p.name == "hpct0" or p.name.startswith("hpct-")]
    found += [f"mount {mnt}" for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if (mnt := line.split()[4]) == "/run/hpctrain-localcluster"
              or mnt.startswith("/run/hpctrain-localcluster/")]
    if "# BEGIN hpctrain-localcluster" in Path("/etc/hosts").read_text().splitlines():
        found.append("hosts block")
    found += [f"pid file {p.name}" for p in (STATE_DIR / "run").glob("*.pid")]
    return found


@pytest.mark.alone
def test_down_removes_everything_and_other_sizes_come_up(cluster):
    size = n_nodes()  # the session's size (HPCTRAIN_CLUSTER_NODES), restored at the end
    try:
        down = run("bash", CLUSTER_DIR / "down.sh")
        assert "localcluster down" in down.stdout
        assert _leftovers() == []
        assert Path("/etc/slurm/slurm.conf").exists() and (STATE_DIR / "ssh" / "id_ed25519").exists()
        assert run(*PODMAN.split(), "image", "exists", IMAGE).returncode == 0

        two = dict(os.environ, HPCTRAIN_CLUSTER_NODES="2", HPCTRAIN_CLUSTER_SIDE_NODES="0")
        two.pop("HPCTRAIN_CLUSTER_SSH_NODES", None)
        up2 = run("bash", CLUSTER_DIR / "up.sh", env=two, timeout=300)
        assert "2 nodes (node[1-2])" in up2.stdout, up2.stdout
        assert run("sinfo", "-h", "-N", "-p", "debug", "-o", "%N").stdout.split() == ["node1", "node2"]
        assert (STATE_DIR / "ssh" / "hosts").read_text().split() == ["node1", "node2", "login"]
        assert run("ssh", "-F", STATE_DIR / "ssh" / "config", "node2", "hostname").stdout.strip() == "node2"
    finally:
        up = run("bash", CLUSTER_DIR / "up.sh", timeout=300, check=False)
    assert up.returncode == 0 and f"{size} nodes ({node_range(size)})" in up.stdout, up.stdout + up.stderr

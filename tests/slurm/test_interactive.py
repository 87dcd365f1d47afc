"""`hpctrain shell`, `launch` and `attach` on the real cluster, through a real pseudo-terminal."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from tests.conftest import ROOT, read_results, submitted
from tests.operate_helpers import job_file
from tests.slurm.survive import wait_until

PROMPT = re.compile(r"\[(?P<name>[a-z0-9-]+)\] (?P<host>node\d):[^\r\n]*[$#] ")


def spawn(*args: str, timeout: float = 60) -> pexpect.spawn:
    # The shell on the node finds `hpctrain` where this one does (srun passes PATH on).
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    child = pexpect.spawn(sys.executable, ["-m", "hpctrain", *args], cwd=str(ROOT), env=env,
                          encoding="utf-8", timeout=timeout, dimensions=(40, 200))
    # What the terminal showed, for a failure's report (pytest prints captured output).
    child.logfile_read = sys.stdout
    return child


def ask(child: pexpect.spawn, command: str, answer: str, timeout: float = 30) -> re.Match:
    """Type a command, return the match of `answer` in what it printed, and wait for the prompt."""
    child.sendline(command)
    child.expect(answer, timeout=timeout)
    found = child.match
    child.expect(PROMPT)
    return found


def listed(job_id: str) -> bool:
    """The job is in squeue's default view (pending, running or completing)."""
    return bool(subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True,
                               text=True).stdout.strip())


def allocation(run_dir: Path) -> str:
    return wait_until(lambda: (run_dir / "status" / "allocation").is_file()
                      and (run_dir / "status" / "allocation").read_text().strip(), 30,
                      "the allocation's job id")


def run_dir_of(child: pexpect.spawn) -> Path:
    child.expect(r"run directory: (\S+)\r\n")
    return Path(child.match.group(1))


def test_shell_has_the_jobs_environment_launches_it_and_exit_releases_it(cli, cluster):
    child = spawn("shell", "examples/ddp_check.yaml", "--site", cluster,
                  "--set", f"python={sys.executable}", "--set", "env.DEBUG_FLAG=it's on")
    run_dir = run_dir_of(child)
    child.expect(PROMPT)
    assert child.match.group("name") == "ddp-check"
    job_id = allocation(run_dir)
    m = ask(child, 'echo "V""=$SLURM_JOB_ID|$SLURMD_NODENAME|$(scontrol show hostnames '
            '"$SLURM_JOB_NODELIST" | paste -sd, -)|$HPCTRAIN_HEAD|$HPCTRAIN_PORT|$HPCTRAIN_RUN_DIR|'
            '$OMP_NUM_THREADS|$DEBUG_FLAG|$PWD"', r"V=(.*)\r\n")
    jid, node, nodes, head, port, rdir, threads, flag, cwd = m.group(1).split("|")
    first = nodes.split(",")[0]
    assert (jid, node, head, rdir) == (job_id, first, first, str(run_dir))
    assert len(nodes.split(",")) == 2 and int(port) >= 61000  # the site's port rule
    assert (threads, flag) == ("1", "it's on")  # the site's env and the job's
    assert cwd == str(run_dir / "code")  # where the program runs: the run's code snapshot

    # The job's launch: 2 nodes x 2 ranks, the preflight, one torchrun per node, all-reduce.
    m = ask(child, "hpctrain launch; echo launch-status\"=$?\"", r"launch-status=(\d+)", timeout=180)
    log = (run_dir / "logs" / f"slurm-{job_id}.out").read_text()
    assert m.group(1) == "0", log
    assert "preflight: 2 nodes must reach" in log and "done: all ranks exited 0" in log
    results = read_results(run_dir)
    assert sorted(r["rank"] for r in results) == [0, 1, 2, 3], log
    assert {r["allreduce"] for r in results} == {6.0}
    assert len({r["host"] for r in results}) == 2

    # Again, as often as the user likes: each launch one attempt in the same run directory.
    (run_dir / "results").rename(run_dir / "results-1")
    m = ask(child, "hpctrain launch; echo launch-status\"=$?\"", r"launch-status=(\d+)", timeout=180)
    log = (run_dir / "logs" / f"slurm-{job_id}.out").read_text()
    assert m.group(1) == "0" and log.count("done: all ranks exited 0") == 2, log
    assert sorted(r["rank"] for r in read_results(run_dir)) == [0, 1, 2, 3]

    child.sendline("exit")
    child.expect(r"shell ended \(status 0\)")
    child.expect(pexpect.EOF)
    assert not listed(job_id), "the allocation outlived its shell"
    assert cli("status", run_dir.name).returncode == 0


def test_ctrl_c_stops_the_launch_and_its_steps_the_shell_stays(cluster, tmp_path, home):
    jf = job_file(tmp_path, "shell-stop", nodes=2, procs=1, args=["--seconds", "60"])
    child = spawn("shell", str(jf), "--site", cluster)
    run_dir = run_dir_of(child)
    child.expect(PROMPT)
    job_id = allocation(run_dir)
    child.sendline('hpctrain launch; echo launch-status"=$?"')
    wait_until(lambda: all("step 1 of" in (run_dir / "logs" / f"rank-{r}.log").read_text()
                           if (run_dir / "logs" / f"rank-{r}.log").exists() else False
                           for r in (0, 1)), 60, "both ranks running", job_id)
    child.sendintr()
    child.expect(r"launch-status=(\d+)", timeout=60)
    assert child.match.group(1) == "130"  # stopped on SIGINT, as a job without a scheduler is
    assert (run_dir / "status" / "stopped.json").is_file()
    steps = subprocess.run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i"], capture_output=True,
                           text=True).stdout.split()
    assert steps == [f"{job_id}.0"], steps  # the shell's own step only: no rank left running
    child.expect(PROMPT)
    child.sendline("exit")
    child.expect(pexpect.EOF)


@pytest.mark.parametrize("how", ["killed", "hung up"])
def test_a_killed_or_disconnected_shell_releases_its_allocation(how, cli, cluster, tmp_path):
    jf = job_file(tmp_path, "shell-end", nodes=1, procs=1)
    child = spawn("shell", str(jf), "--site", cluster)
    run_dir = run_dir_of(child)
    child.expect(PROMPT)
    job_id = allocation(run_dir)
    assert listed(job_id)
    if how == "killed":
        os.kill(child.pid, signal.SIGKILL)  # the terminal stays open: nothing hangs up
    else:
        child.close(force=False)  # the terminal goes away (an ssh connection dropped)
    wait_until(lambda: not listed(job_id), 30, f"job {job_id} to end after its shell was {how}")
    child.close(force=True)


@pytest.fixture(scope="module")
def running(cluster, tmp_path_factory):
    """One 2-node x 2-rank job that runs while the attach tests look into it (by its run
    directory: each test has a home of its own)."""
    from tests.conftest import Cli
    tmp = tmp_path_factory.mktemp("attach")
    jf = job_file(tmp, "attach-me", nodes=2, procs=2, args=["--seconds", "120"])
    env = {"HPCTRAIN_HOME": str(tmp / "home"), "HPCTRAIN_RUNS_DIR": str(tmp / "runs")}
    job_id, run_dir = submitted(Cli()("submit", str(jf), "--site", cluster, env=env).stdout)
    wait_until(lambda: len(list((run_dir / "status").glob("rank-*.json"))) == 4
               and len(list((run_dir / "logs").glob("rank-*.log"))) == 4
               and all("step 1 of" in p.read_text() for p in (run_dir / "logs").glob("rank-*.log")),
               90, "4 ranks running", job_id)
    yield job_id, run_dir
    subprocess.run(["scancel", job_id])


@pytest.mark.parametrize("how", ["--node", "--rank"])
def test_attach_reaches_a_running_jobs_second_node(how, running, home):
    job_id, run_dir = running
    nodes = subprocess.run(["scontrol", "show", "hostnames", subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%N"], capture_output=True, text=True).stdout.strip()],
        capture_output=True, text=True).stdout.split()
    target = nodes[1] if how == "--node" else "3"  # ranks 2 and 3 run on the second node
    child = spawn("attach", str(run_dir), how, target)
    child.sendline('echo "A""T=$SLURMD_NODENAME|$SLURM_JOB_ID|$PWD"')
    child.expect(r"AT=(node\d)\|(\d+)\|(\S+)\r\n")
    assert child.match.groups() == (nodes[1], job_id, str(run_dir))
    child.sendline("exit")
    child.expect(pexpect.EOF)
    assert listed(job_id), "the job ended with the attached shell"


def test_stacks_prints_every_ranks_stack_and_the_job_goes_on(cli, running):
    job_id, run_dir = running
    out = cli("attach", str(run_dir), "--stacks", timeout=90).stdout
    sections = re.split(r"^--- rank (\d) on (node\d) \(pid \d+\)$", out, flags=re.M)
    assert [int(r) for r in sections[1::3]] == [0, 1, 2, 3], out
    for text in sections[3::3]:
        assert re.search(r"^Current thread 0x[0-9a-f]+ \(most recent call first\):$", text, re.M), out
        assert re.search(r'^  File ".*worker\.py", line \d+ in main$', text, re.M), out
    before = {p.name: p.read_text().count("step ") for p in (run_dir / "logs").glob("rank-*.log")}
    wait_until(lambda: all(p.read_text().count("step ") > before[p.name]
                           for p in (run_dir / "logs").glob("rank-*.log")), 30,
               "every rank to go on after its dump", job_id)
    assert listed(job_id)


def test_a_refused_allocation_is_an_error_with_the_schedulers_words(cli, cluster, tmp_path):
    jf = job_file(tmp_path, "no-such", nodes=1, procs=1)
    proc = cli("shell", str(jf), "--site", cluster, "--set", "resources.partition=nosuch",
               check=False, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "invalid partition" in proc.stderr.lower()  # salloc's own words, above hpctrain's
    assert "error: no allocation was granted" in proc.stderr and "Traceback" not in proc.stderr


def test_shell_in_the_jobs_podman_container_launches_from_it(cli, cluster, tmp_path):
    """A job with a container: the shell runs in it on the first node (the image, the binds, the
    job's variables); `hpctrain launch` there runs the launch on the host (where srun is), its
    ranks in containers as the batch job's, and comes back to a new shell in the container;
    exit releases the allocation and leaves no container."""
    import json

    from tests.slurm.test_containers import IMAGE, containers, mounts
    extra = tmp_path / "extra"
    extra.mkdir()
    jf = job_file(tmp_path, "in-image", nodes=2, procs=1, args=["--seconds", "1"])
    container = {"runtime": "podman", "image": IMAGE, "mounts": mounts(extra)}
    child = spawn("shell", str(jf), "--site", cluster, "--set", f"container={json.dumps(container)}")
    inside = re.compile(r"\[in-image\] \(container\) [^\r\n]*[$#] ")
    run_dir = run_dir_of(child)
    child.expect(inside, timeout=120)
    job_id = allocation(run_dir)
    m = ask_in(child, inside, 'echo "C""=$([[ -e /run/.containerenv ]] && echo yes)|$SLURM_JOB_ID|'
               '$HPCTRAIN_RUN_DIR|$(type -t hpctrain)"', r"C=(.*)\r\n")
    assert m.group(1).split("|") == ["yes", job_id, str(run_dir), "function"], m.group(1)
    assert [c for c in containers(job_id) if c] == [], "the shell's container is not a rank's"

    child.sendline("hpctrain launch")
    child.expect(r"hpctrain launch: exit status (\d+)", timeout=180)
    log = (run_dir / "logs" / f"slurm-{job_id}.out").read_text()
    assert child.match.group(1) == "0", log
    child.expect(inside)
    assert "done: all ranks exited 0" in log
    got = read_results(run_dir)
    assert sorted(r["rank"] for r in got) == [0, 1] and len({r["host"] for r in got}) == 2, got

    child.sendline("exit")
    child.expect(r"shell ended \(status 0\)", timeout=60)
    child.expect(pexpect.EOF)
    assert not listed(job_id), "the allocation outlived its shell"
    wait_until(lambda: not subprocess.run(
        ["podman", "--runtime", "runc", "--cgroup-manager=cgroupfs", "ps", "-a", "-q",
         "--filter", f"ancestor={IMAGE}"], capture_output=True, text=True).stdout.strip(), 30,
        "no container left")


def ask_in(child: pexpect.spawn, prompt: re.Pattern, command: str, answer: str) -> re.Match:
    child.sendline(command)
    child.expect(answer, timeout=30)
    found = child.match
    child.expect(prompt)
    return found


def test_attach_enters_the_ranks_podman_container(cluster, tmp_path, home):
    """A job whose ranks run in Podman containers: attach opens its shell in the container of
    the node's rank (the ranks' variables, /run/.containerenv), and the job goes on."""
    import json

    from tests.conftest import Cli
    from tests.slurm.test_containers import IMAGE, mounts
    extra = tmp_path / "extra"
    extra.mkdir()
    jf = job_file(tmp_path, "attach-image", nodes=2, procs=1, args=["--seconds", "60"])
    container = {"runtime": "podman", "image": IMAGE, "mounts": mounts(extra)}
    job_id, run_dir = submitted(Cli()("submit", str(jf), "--site", cluster,
                                      "--set", f"container={json.dumps(container)}").stdout)
    try:
        wait_until(lambda: len(list((run_dir / "logs").glob("rank-*.log"))) == 2
                   and all("step 1 of" in p.read_text() for p in (run_dir / "logs").glob("rank-*.log")),
                   90, "2 ranks running", job_id)
        child = spawn("attach", str(run_dir), "--rank", "1")
        child.sendline('echo "I""N=$([[ -e /run/.containerenv ]] && echo yes)|$SLURM_JOB_ID|$SLURM_PROCID"')
        child.expect(r"IN=(\S*)\|(\d*)\|(\d*)\r\n")
        assert child.match.groups() == ("yes", job_id, "1")  # rank 1's own container
        child.sendline("exit")
        child.expect(pexpect.EOF)
        assert listed(job_id), "the job ended with the attached shell"
    finally:
        subprocess.run(["scancel", job_id])

"""Submitting from a laptop: hpctrain runs in the test cluster's `laptop` namespace (no Slurm
configuration, no route but to the login node) against a site whose `login:` is the cluster's
login sshd. Every scheduler command goes over ssh; the run lives under the site's remote runs
directory; the laptop keeps a mirror (run.json, fetched logs and results)."""
from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, submitted
from tests.hostile import canary_payloads, tried
from tests.notebooks import RUN_NOTEBOOK, cell_text, kernelspec


ON_LAPTOP = ROOT / "tests" / "cluster" / "on-laptop.sh"
WORKER = ROOT / "tests" / "programs" / "worker.py"


def ssh_info() -> dict[str, str]:
    out = subprocess.run(["bash", str(ROOT / "tests" / "cluster" / "ssh-info.sh")],
                         capture_output=True, text=True, check=True).stdout
    return {k: v.strip("'") for k, _, v in (line.partition("=") for line in out.splitlines())}


@pytest.fixture
def far():
    """The cluster's runs directory: a directory of this test's own (the filesystem is shared,
    so the test can look into it; hpctrain on the laptop only reaches it over ssh)."""
    d = Path(tempfile.mkdtemp(prefix="hpct-far-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def site_file(tmp_path: Path, far: Path, **over) -> Path:
    info = ssh_info()
    doc = yaml.safe_load((ROOT / "site_configs" / "localcluster.yaml").read_text())
    doc.update(name="viacluster", login="root@login",
               ssh={"identity": info["HPCTRAIN_CLUSTER_SSH_KEY"],
                    "known_hosts": info["HPCTRAIN_CLUSTER_SSH_KNOWN_HOSTS"],
                    "host_key": "accept-new", "connect_timeout": 5},
               remote={"runs_dir": str(far)})
    doc.update(over)
    path = tmp_path / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def site(tmp_path, far, cluster) -> Path:
    return site_file(tmp_path, far)


@pytest.fixture
def project(tmp_path) -> Path:
    """A small project on the laptop: a rank program and a job file that names it relatively."""
    d = tmp_path / "proj"
    d.mkdir()
    text = WORKER.read_text().replace('    rank = int(os.environ.get("RANK", "0"))\n',
                                      '    rank = int(os.environ.get("RANK", "0"))\n'
                                      '    print(f"code version A on rank {rank}", flush=True)\n')
    (d / "train.py").write_text(text)
    (d / ".gitignore").write_text("ignored/\n")
    (d / "ignored").mkdir()
    (d / "ignored" / "big.bin").write_bytes(b"x" * 1000)
    subprocess.run(["git", "init", "-q", str(d)], check=True)
    return d


def job(project: Path, name: str, *, nodes=1, procs=1, args=(), **over) -> Path:
    doc = {"name": name, "library": "command", "script": "train.py",
           "args": [str(a) for a in args], "python": sys.executable, "seed": 100,
           "resources": {"nodes": nodes, "procs_per_node": procs, "time": "00:05:00"}}
    doc.update(over)
    path = project / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def laptop(*args, cwd: Path, check: bool = True, timeout: float = 180, env=None,
           stdin=subprocess.DEVNULL):
    """`hpctrain ARGS` on the laptop, from cwd."""
    proc = subprocess.run([str(ON_LAPTOP), sys.executable, "-m", "hpctrain", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})), stdin=stdin)
    if check and proc.returncode != 0:
        raise AssertionError(f"hpctrain {' '.join(map(str, args))} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def status(ref: str, cwd: Path) -> dict:
    return json.loads(laptop("status", ref, "--json", cwd=cwd).stdout)


def wait_state(ref: str, cwd: Path, states: set[str], timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    st: dict = {}
    while time.monotonic() < deadline:
        st = status(ref, cwd)
        if st["state"]["state"] in states:
            return st
        time.sleep(1)
    raise AssertionError(f"{ref} did not reach {states}: {st.get('state')}")


def far_run(far: Path, name: str, run_id: str) -> Path:
    return far / name / run_id


def test_laptop_has_no_slurm(cluster):
    proc = subprocess.run([str(ON_LAPTOP), "sbatch", "--version"], capture_output=True, text=True)
    assert proc.returncode != 0, "the laptop namespace must not reach Slurm by itself"


def test_submit_follow_status_list_from_laptop(home, site, project, far):
    jf = job(project, "far-follow", args=["--seconds", "4"])
    dry = laptop("submit", jf.name, "--site", site, "--dry-run", cwd=project).stdout
    assert "# would run: ssh root@login -- sbatch --parsable " + str(far) in dry
    assert f"cd {far}/far-follow/" in dry and "/code" in dry
    out = laptop("submit", jf.name, "--site", site, cwd=project).stdout
    job_id, mirror = submitted(out)
    assert mirror.is_relative_to(Path(os.environ["HPCTRAIN_RUNS_DIR"])), out
    cluster_dir = far_run(far, "far-follow", mirror.name)
    assert f"cluster: login:{cluster_dir}" in out and "code: 3 files" in out, out
    # Edited on the laptop right after submitting: the job runs the code as it was.
    (project / "train.py").write_text((project / "train.py").read_text().replace(
        "code version A", "code version B"))
    assert (cluster_dir / "code" / "train.py").is_file()
    assert not (cluster_dir / "code" / "ignored").exists()  # .gitignore respected
    follow = laptop("logs", job_id, "-f", cwd=project, timeout=300)
    assert "code version A on rank 0" in follow.stdout and "rank 0 done" in follow.stdout
    assert "version B" not in follow.stdout
    st = status(job_id, project)
    assert st["state"]["state"] == "COMPLETED" and st["state"]["exit_code"] == 0, st
    assert st["path"] == str(mirror)
    rec = json.loads((mirror / "run.json").read_text())
    assert rec["remote"]["path"] == str(cluster_dir) and rec["remote"]["login"] == "login"
    assert (mirror / "results" / "rank-0.json").is_file()  # fetched
    assert list((mirror / "logs").glob("slurm-*.out"))
    listed = laptop("list", cwd=project).stdout
    assert "far-follow" in listed and "COMPLETED" in listed


def test_cancel_from_laptop(home, site, project, far):
    jf = job(project, "far-cancel", args=["--seconds", "120"])
    job_id, mirror = submitted(laptop("submit", jf.name, "--site", site, cwd=project).stdout)
    wait_state(mirror.name, project, {"RUNNING"})
    laptop("cancel", mirror.name, cwd=project)
    st = wait_state(job_id, project, {"CANCELLED"}, timeout=60)
    assert st["state"]["done"]
    assert "CANCELLED" in laptop("list", cwd=project).stdout


def test_two_node_training_with_wait_from_laptop(home, site, project, far):
    shutil.copy(ROOT / "examples" / "ddp_check.py", project / "ddp_check.py")
    jf = job(project, "far-ddp", nodes=2, procs=1, args=["--steps", "3"], seed=1234,
             script="ddp_check.py")
    proc = laptop("submit", jf.name, "--site", site, "--wait", cwd=project, timeout=400,
                  check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "COMPLETED" in proc.stdout
    job_id, mirror = submitted(proc.stdout)
    results = [json.loads(p.read_text()) for p in sorted((mirror / "results").glob("rank-*.json"))]
    assert sorted(r["rank"] for r in results) == [0, 1]
    assert len({r["host"] for r in results}) == 2
    assert {r["allreduce"] for r in results} == {1.0}  # 0 + 1 over both nodes


def test_hostile_exclude_patterns_from_the_laptop(home, project, far, tmp_path, cluster, monkeypatch):
    """Issue 11 on the laptop path. Of the site fields only that path reads, `login` and
    `remote.runs_dir` refuse every canary payload (strict patterns); `remote.exclude` takes
    nearly all. All of those but `*` (which leaves out every file, the program too) go into one
    site's exclude list: the laptop's submit copies the code without what they match, the job
    completes, and nothing runs on either side."""
    from hpctrain.errors import HpctrainError
    from hpctrain.job.load import load_job
    canary = tmp_path / "CANARY"
    monkeypatch.chdir(project)  # where the job's script is

    def accepted(pattern: str) -> bool:
        s = site_file(tmp_path, far, name="excl", remote={"runs_dir": str(far), "exclude": [pattern]})
        try:
            load_job({"name": "excl", "script": "train.py", "python": sys.executable}, site=str(s))
            return True
        except HpctrainError:
            return False
    patterns = [p for p in canary_payloads(str(canary)) if accepted(p)]
    assert len(patterns) >= 30 and "*" in patterns, patterns
    # (a pattern that matches the program leaves it out: the job could not run)
    patterns = [p for p in patterns if not fnmatch.fnmatch("train.py", p) and not fnmatch.fnmatch("kept.txt", p)]
    tried("execution", len(patterns))
    (project / "a b  c").write_text("left out by the pattern of the same name\n")
    (project / "kept.txt").write_text("copied\n")
    s = site_file(tmp_path, far, name="excl", remote={"runs_dir": str(far), "exclude": patterns})
    proc = laptop("submit", job(project, "far-excl").name, "--site", s, "--wait", cwd=project,
                  timeout=300, check=False)
    assert proc.returncode == 0 and "COMPLETED" in proc.stdout, proc.stdout + proc.stderr
    _, mirror = submitted(proc.stdout)
    code = far_run(far, "far-excl", mirror.name) / "code"
    assert (code / "train.py").is_file() and (code / "kept.txt").is_file()
    assert not (code / "a b  c").exists()
    assert not canary.exists() and not list(far.rglob("CANARY")) and not list(project.rglob("CANARY"))


def grep_files(value: str, *dirs: Path) -> list[str]:
    """Every file under dirs that holds value (grep -r, binary files included)."""
    proc = subprocess.run(["grep", "-rlaF", value, *map(str, dirs)], capture_output=True, text=True)
    return proc.stdout.split()


def test_secret_reaches_the_job_without_touching_a_file(home, site, project, far, tmp_path):
    value = "hpct-secret-" + os.urandom(8).hex()
    (project / "show.py").write_text(
        "import hashlib, json, os\n"
        "out = os.path.join(os.environ['HPCTRAIN_RUN_DIR'], 'results')\n"
        "os.makedirs(out, exist_ok=True)\n"
        "digest = hashlib.sha256(os.environ['HPCT_TOKEN'].encode()).hexdigest()\n"
        "json.dump({'sha256': digest}, open(os.path.join(out, 'secret.json'), 'w'))\n"
        "print('the secret arrived', flush=True)\n")
    jf = job(project, "far-secret", script="show.py", secrets=["HPCT_TOKEN"])
    proc = laptop("submit", jf.name, "--site", site, "--wait", cwd=project, timeout=300,
                  env={"HPCT_TOKEN": value})
    _, mirror = submitted(proc.stdout)
    import hashlib
    got = json.loads((mirror / "results" / "secret.json").read_text())
    assert got["sha256"] == hashlib.sha256(value.encode()).hexdigest()
    # Neither side wrote it: the laptop's runs and state, the cluster's run directory (code,
    # script, logs), ssh's socket directory, this test's whole temporary tree.
    assert grep_files(value, mirror, far, home, tmp_path, Path("/tmp/hpctrain-ssh-0")) == []

    # `submit --resume` of this login-node run: without the secret it is refused before anything
    # is submitted; with it, the job is submitted again on the cluster, through the login node
    # (the laptop has no sbatch), and the secret reaches the new attempt the same way.
    first = json.loads((mirror / "run.json").read_text())["job_id"]
    proc = laptop("submit", "--resume", mirror.name, cwd=project, check=False)
    assert proc.returncode == 2 and "HPCT_TOKEN" in proc.stderr and "Traceback" not in proc.stderr
    assert json.loads((mirror / "run.json").read_text())["job_id"] == first
    (mirror / "results" / "secret.json").unlink()
    (far_run(far, "far-secret", mirror.name) / "results" / "secret.json").unlink()
    laptop("submit", "--resume", mirror.name, cwd=project, env={"HPCT_TOKEN": value})
    rec = json.loads((mirror / "run.json").read_text())
    assert rec["job_id"] != first and rec["jobs"] == [first]
    st = wait_state(mirror.name, project, {"COMPLETED", "FAILED"}, timeout=240)
    assert st["state"]["state"] == "COMPLETED", st
    got = json.loads((mirror / "results" / "secret.json").read_text())
    assert got["sha256"] == hashlib.sha256(value.encode()).hexdigest()
    assert grep_files(value, mirror, far, home, tmp_path, Path("/tmp/hpctrain-ssh-0")) == []


def test_notebook_on_the_laptop_submits_a_function_and_a_job(home, site, project, far, tmp_path):
    """A real Jupyter kernel on the laptop (ipykernel, run by nbclient there): one cell submits a
    function to 2 nodes and gets its results back, the next submits a job file and waits for it,
    as a researcher's notebook would."""
    import nbformat
    jf = job(project, "far-api", nodes=2, procs=1, args=["--seconds", "1"])
    cells = [
        "import json, sys, hpctrain\n"
        f"site = {str(site)!r}",
        "def square_plus_rank(x):\n"
        "    import os\n"
        "    return x * x + int(os.environ['RANK'])\n\n"
        f"fn = hpctrain.submit_function(square_plus_rank, {{'name': 'far-fn', 'site': site, "
        f"'python': {sys.executable!r}, 'resources': {{'nodes': 2, 'procs_per_node': 1, "
        "'time': '00:05:00'}}, 7)\n"
        "print('RESULTS', fn.results(timeout=240))\n"
        "print('RUN', fn.run_dir)",
        f"handle = hpctrain.submit({jf.name!r}, site=site)\n"
        "print('RESULT', json.dumps(handle.result(timeout=240)))\n"
        "print('STATE', handle.status().state.value)\n"
        "handle",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    path = tmp_path / "laptop.ipynb"
    nbformat.write(nb, path)
    proc = subprocess.run([str(ON_LAPTOP), sys.executable, "-c", RUN_NOTEBOOK, str(path), str(project)],
                          cwd=project, capture_output=True, text=True, timeout=400,
                          env=dict(os.environ, JUPYTER_PATH=str(kernelspec(tmp_path, sys.executable))))
    outputs = [cell_text(c) for c in nbformat.read(path, as_version=4).cells]
    assert proc.returncode == 0, "\n".join(outputs) + proc.stdout + proc.stderr
    _, fn_out, job_out = outputs
    # The function: pickled on the laptop, run on two nodes, its results fetched back.
    assert "RESULTS [49, 50]" in fn_out, fn_out
    mirror = Path(fn_out.split("RUN ", 1)[1].split()[0])
    assert mirror.is_relative_to(Path(os.environ["HPCTRAIN_RUNS_DIR"]))
    assert list((far / "far-fn").glob("*/submitit/*_submitted.pkl"))  # pickled here, sent there
    # The job file: its command ran on the cluster's copy of the code; the handle shows itself.
    result = json.loads(job_out.split("RESULT ", 1)[1].splitlines()[0])
    mirror = Path(result["run_dir"])
    assert result["exit_code"] == 0 and mirror.is_relative_to(Path(os.environ["HPCTRAIN_RUNS_DIR"]))
    assert "STATE COMPLETED" in job_out and f"<hpctrain run {mirror.name}" in job_out, job_out
    assert (far_run(far, "far-api", mirror.name) / "code" / "train.py").is_file()
    ranks = sorted(json.loads(p.read_text())["rank"] for p in (mirror / "results").glob("rank-*.json"))
    assert ranks == [0, 1], job_out  # fetched back through the login node
    assert status(result["job"], project)["state"]["state"] == "COMPLETED"


def accepted_logins(log: Path) -> list[str]:
    """sshd's record of every connection it let in from the laptop (one line each)."""
    return [line for line in log.read_text(errors="replace").splitlines()
            if line.startswith("Accepted publickey for root from 10.231.0.3 ")]


@pytest.mark.alone  # the control sockets it counts share /tmp/hpctrain-ssh-0 with the ssh tier's
def test_every_command_rides_one_connection_to_the_login_node(home, project, far, tmp_path, cluster):
    """Item 1: submit (mkdir, rsync of the code, sbatch), status (squeue, scontrol, sacct), logs
    and list (fetches over rsync) from the laptop open ONE ssh connection to the login node,
    counted in the login sshd's own log, and share it through one control socket."""
    # ssh words of this run's own (a known_hosts copy in its temporary directory): a connection
    # of its own, not one that an earlier test (or run of it) left up.
    known = tmp_path / "known_hosts"
    shutil.copy(ssh_info()["HPCTRAIN_CLUSTER_SSH_KNOWN_HOSTS"], known)
    s = site_file(tmp_path, far, name="onemaster", ssh=ssh_section(known_hosts=str(known)))
    log = Path(ssh_info()["HPCTRAIN_CLUSTER_LOG_DIR"]) / "sshd-login.log"
    sockets = set(Path("/tmp/hpctrain-ssh-0").glob("*"))
    before = len(accepted_logins(log))
    jf = job(project, "far-one", args=["--seconds", "2"])
    job_id, mirror = submitted(laptop("submit", jf.name, "--site", s, cwd=project).stdout)
    st = wait_state(job_id, project, {"COMPLETED"})
    assert "rank 0 done" in laptop("logs", job_id, cwd=project).stdout
    assert "far-one" in laptop("list", cwd=project).stdout
    assert (mirror / "results" / "rank-0.json").is_file(), st
    new = accepted_logins(log)[before:]
    # (Without the shared connection, the same steps open 14.)
    assert len(new) == 1, new  # for submit, every status poll, logs and list
    [socket] = set(Path("/tmp/hpctrain-ssh-0").glob("*")) - sockets
    assert socket.is_socket()
    # It is still up for the next command (ControlPersist), and it is the login node's.
    check = subprocess.run(["ssh", "-o", f"ControlPath={socket}", "-O", "check", "login"],
                           capture_output=True, text=True)
    assert check.returncode == 0 and "Master running" in check.stderr, check.stderr


def test_python_version_mismatch_is_a_clear_error(home, site, project):
    other = "/root/.pyenv/versions/3.12.1/bin/python3"
    assert Path(other).exists()
    cell = f"""
import hpctrain
job = {{"name": "far-py", "site": {str(site)!r}, "python": {other!r}}}
try:
    hpctrain.submit_function(lambda: 1, job)
except hpctrain.HpctrainError as exc:
    print("ERROR", exc)
"""
    proc = subprocess.run([str(ON_LAPTOP), sys.executable, "-c", cell], cwd=project,
                          capture_output=True, text=True, timeout=120)
    assert "ERROR" in proc.stdout, proc.stdout + proc.stderr
    assert "the cluster's Python is 3.12" in proc.stdout and "this one is 3.11" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


# ----------------------------------------------------------------------------- bad setups

def refused(proc) -> str:
    """The CLI's error: exit 2, a message and a fix, never a traceback."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "fix:" in proc.stderr, proc.stderr
    return proc.stderr


def ssh_section(**over) -> dict:
    info = ssh_info()
    return dict({"identity": info["HPCTRAIN_CLUSTER_SSH_KEY"],
                 "known_hosts": info["HPCTRAIN_CLUSTER_SSH_KNOWN_HOSTS"],
                 "host_key": "accept-new", "connect_timeout": 5}, **over)


def test_unreachable_login_node(home, project, far, tmp_path, cluster):
    s = site_file(tmp_path, far, name="nowhere", login="root@10.231.0.99")
    err = refused(laptop("submit", job(project, "far-x").name, "--site", s, cwd=project,
                         check=False))
    assert "cannot reach the login node: 10.231.0.99 did not answer ssh" in err
    assert not any(far.iterdir())


def test_refused_key(home, project, far, tmp_path, cluster):
    key = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    # By address: the laptop's own ~/.ssh config (a Host login entry with the cluster's key,
    # which ssh would offer too) does not apply to it.
    s = site_file(tmp_path, far, name="stranger", login="root@10.231.0.2",
                  ssh=ssh_section(identity=str(key)))
    err = refused(laptop("submit", job(project, "far-x").name, "--site", s, cwd=project,
                         check=False))
    assert "10.231.0.2 rejected the ssh login" in err and "ssh-copy-id" in err


LOGIN_MNT = "/run/hpctrain-localcluster/ns/login.mnt"


def on_login_mounts(*command: str) -> None:
    """A mount seen by the login node alone (its own mount namespace)."""
    subprocess.run(["nsenter", f"--mount={LOGIN_MNT}", "--", *command], check=True)


def test_sbatch_missing_on_the_login_node(home, site, project, far, tmp_path):
    # /usr/bin on login only, without sbatch: an overlay whose upper layer hides it (a whiteout).
    layer = Path(tempfile.mkdtemp(prefix="hpct-ov-", dir="/tmp"))
    (layer / "upper").mkdir()
    (layer / "work").mkdir()
    os.mknod(layer / "upper" / "sbatch", 0o600 | 0o020000, os.makedev(0, 0))
    on_login_mounts("mount", "-t", "overlay", "overlay", "-o",
                    f"lowerdir=/usr/bin,upperdir={layer}/upper,workdir={layer}/work", "/usr/bin")
    try:
        err = refused(laptop("submit", job(project, "far-x").name, "--site", site, cwd=project,
                             check=False))
    finally:
        on_login_mounts("umount", "--lazy", "/usr/bin")  # lazy: a session may still run from it
        shutil.rmtree(layer, ignore_errors=True)
    assert "'sbatch' is not found on the login node login" in err and "~/.bashrc" in err


def test_disk_full_on_the_cluster(home, project, tmp_path, cluster):
    small = Path(tempfile.mkdtemp(prefix="hpct-full-", dir="/tmp"))
    on_login_mounts("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small))
    try:
        (project / "weights.bin").write_bytes(os.urandom(1 << 20))
        s = site_file(tmp_path, small, name="small")
        err = refused(laptop("submit", job(project, "far-x").name, "--site", s, cwd=project,
                             check=False))
    finally:
        on_login_mounts("umount", "--lazy", str(small))
        shutil.rmtree(small, ignore_errors=True)
    assert "the cluster's disk is full at " in err and "No space left on device" in err
    assert "remote.runs_dir" in err
    assert not list(Path(os.environ["HPCTRAIN_RUNS_DIR"]).glob("*/*/run.json"))  # nothing left here


def _login_sessions() -> list[int]:
    """The sshd processes serving connections to login (the listener's children)."""
    listener = Path("/var/lib/hpctrain-localcluster/run/sshd-login.pid").read_text().split()[0]
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == listener:
            kids.append(int(stat.parent.name))
    return kids


def test_follow_survives_a_dropped_connection(home, site, project, far):
    import signal
    import threading
    # 20 s of steps: the drop and the return take a few (a fetch a second), under load too.
    jf = job(project, "far-drop", args=["--seconds", "20"])
    job_id, mirror = submitted(laptop("submit", jf.name, "--site", site, cwd=project).stdout)
    follower = subprocess.Popen([str(ON_LAPTOP), sys.executable, "-m", "hpctrain", "logs",
                                 job_id, "-f"], cwd=project, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    out: list[str] = []
    err: list[str] = []
    for stream, sink in ((follower.stdout, out), (follower.stderr, err)):
        threading.Thread(target=lambda s=stream, k=sink: k.extend(iter(s.readline, "")),
                         daemon=True).start()

    def until(what, sink, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(what in line for line in sink):
                return
            time.sleep(0.2)
        follower.kill()
        raise AssertionError(f"no {what!r}: stdout {''.join(out)} stderr {''.join(err)}")

    sshd = str(ROOT / "tests" / "cluster" / "node-sshd.sh")
    try:
        until("step 2 of rank 0", out)
        sessions = _login_sessions()
        subprocess.run([sshd, "login", "stop", "--quiet"], check=True)
        for pid in sessions:  # the connection drops (as when a laptop's network goes away)
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        until("lost the connection to login", err)
    finally:
        subprocess.run([sshd, "login", "start", "--quiet"], check=True)
    until("reconnected to login", err)
    assert follower.wait(timeout=300) == 0, "".join(err)
    time.sleep(0.5)
    text = "".join(out)
    assert "rank 0 done" in text and "done: all ranks exited 0" in text, text
    steps = [line for line in text.splitlines() if "step " in line and "of rank 0" in line]
    assert len(steps) == len(set(steps)) == 40, steps  # every line once, none lost, none twice


def test_shell_from_the_laptop_through_the_login_host(home, site, project, far):
    """`hpctrain shell` on the laptop: salloc runs on the login node (ssh with a terminal), the
    shell opens on the allocation's first node with the job's variables and the run directory
    on the cluster; `hpctrain launch` there (hpctrain is not on the node's PATH: the shell's
    own stand-in runs the launch) starts the 2-node job; `exit` releases the allocation, and
    the laptop's mirror has its job id and the launch's results."""
    import pexpect

    from tests.slurm.test_interactive import PROMPT, listed
    jf = job(project, "lap-shell", nodes=2, procs=1, args=["--seconds", "1"])
    child = pexpect.spawn(str(ON_LAPTOP), [sys.executable, "-m", "hpctrain", "shell", jf.name,
                                           "--site", str(site)],
                          cwd=str(project), encoding="utf-8", timeout=120, dimensions=(40, 200))
    child.logfile_read = sys.stdout
    child.expect(r"run directory: (\S+) \(on the cluster; here: (\S+)\)\r\n")
    cluster_dir, mirror = Path(child.match.group(1)), Path(child.match.group(2))
    assert cluster_dir.is_relative_to(far) and mirror.is_relative_to(home.parent)
    child.expect(PROMPT)
    assert child.match.group("name") == "lap-shell"
    child.sendline('echo "V""=$SLURM_JOB_ID|$HPCTRAIN_RUN_DIR|$PWD|$(type -t hpctrain)"')
    child.expect(r"V=(\d+)\|(\S*)\|(\S*)\|(\S*)\r\n")
    job_id, rdir, cwd, kind = child.match.groups()
    assert (rdir, cwd) == (str(cluster_dir), str(cluster_dir / "code")), child.match.groups()
    assert kind == "function"  # the node has no hpctrain on its PATH
    child.expect(PROMPT)

    child.sendline('hpctrain launch; echo launch-status"=$?"')
    child.expect(r"launch-status=(\d+)", timeout=180)
    log = (cluster_dir / "logs" / f"slurm-{job_id}.out").read_text()
    assert child.match.group(1) == "0", log
    results = [json.loads(p.read_text()) for p in sorted((cluster_dir / "results").glob("rank-*.json"))]
    assert sorted(r["rank"] for r in results) == [0, 1], log
    assert len({r["host"] for r in results}) == 2, results
    child.expect(PROMPT)

    child.sendline("exit")
    child.expect(r"shell ended \(status 0\)")
    child.expect(pexpect.EOF)
    child.close()
    assert not listed(job_id), "the allocation outlived its shell"
    rec = json.loads((mirror / "run.json").read_text())
    assert rec["job_id"] == job_id and rec["remote"]["path"] == str(cluster_dir), rec
    assert rec["interactive"] is True, rec
    assert laptop("status", mirror.name, cwd=project).returncode == 0
    assert sorted(p.name for p in (mirror / "results").glob("rank-*.json")) == ["rank-0.json", "rank-1.json"]


def test_a_killed_laptop_shell_releases_its_allocation_on_the_cluster(home, site, project, far):
    """The laptop's hpctrain killed outright (a closed lid, a crashed terminal): its ssh gets
    SIGHUP from the kernel and ends, the login node's sshd hangs up the session, and salloc
    releases the allocation."""
    import signal

    import pexpect

    from tests.slurm.survive import wait_until
    from tests.slurm.test_interactive import PROMPT, listed
    jf = job(project, "lap-kill", nodes=1, procs=1)
    child = pexpect.spawn(str(ON_LAPTOP), [sys.executable, "-m", "hpctrain", "shell", jf.name,
                                           "--site", str(site)],
                          cwd=str(project), encoding="utf-8", timeout=120, dimensions=(40, 200))
    child.logfile_read = sys.stdout
    child.expect(PROMPT)
    child.sendline('echo "J""=$SLURM_JOB_ID"')
    child.expect(r"J=(\d+)\r\n")
    job_id = child.match.group(1)
    assert listed(job_id)
    os.kill(child.pid, signal.SIGKILL)
    wait_until(lambda: not listed(job_id), 60, "the allocation to be released")
    child.close(force=True)

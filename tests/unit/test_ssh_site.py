"""The ssh backend's pure logic: a site's hosts and ssh: options at load (each mistake an error
with the profile's file:line and a fix), the ssh command line, and ssh's failures explained."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from hpctrain.backends.ssh import openssh
from hpctrain.errors import HpctrainError
from hpctrain.job.load import load_job
from hpctrain.job.plan import make_plan

JOB = {"name": "ws", "script": "train.py", "python": "python", "runs_dir": "/runs"}


def site_file(tmp_path, body: str, name: str = "lab"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nscheduler: ssh\n" + body)
    return path


def load(tmp_path, body: str, **job):
    return load_job(dict(JOB, **job), site=str(site_file(tmp_path, body)))


def refused(tmp_path, body: str, **job) -> HpctrainError:
    with pytest.raises(HpctrainError) as info:
        load(tmp_path, body, **job)
    return info.value


# ----------------------------------------------------------------------------- hosts

def test_hosts_as_a_slurm_style_list_a_yaml_list_or_a_hostfile(tmp_path):
    assert openssh.site_hosts("ws[1-3],gpu07", "") == ["ws1", "ws2", "ws3", "gpu07"]
    assert openssh.site_hosts(["ws[1-2]", "10.0.0.7"], "") == ["ws1", "ws2", "10.0.0.7"]
    (tmp_path / "lab-hosts").write_text("# the lab\nws1   # the fast one\n\nbox[01-02]\n")
    # A relative hostfile is the profile's neighbour, not the working directory's.
    assert openssh.site_hosts("./lab-hosts", str(tmp_path / "lab.yaml")) == ["ws1", "box01", "box02"]


@pytest.mark.parametrize("hosts,said", [
    ("ws[1-2],ws2", "ws2 is named twice: one torchrun per host"),
    (["ws1", "-oProxyCommand=x"], "entry 1: '-oProxyCommand=x' is not a host name"),
    ("ws_1", "'ws_1' is not a host name or IPv4 address"),
    ("./missing-hosts", "missing-hosts does not exist"),
])
def test_bad_hosts(tmp_path, hosts, said):
    with pytest.raises(ValueError, match=None) as info:
        openssh.site_hosts(hosts, str(tmp_path / "lab.yaml"))
    assert said in str(info.value)


def test_a_hostfile_line_with_slots_says_where_ranks_per_host_are_set(tmp_path):
    (tmp_path / "hf").write_text("ws1\nws2 slots=4\n")
    with pytest.raises(ValueError) as info:
        openssh.site_hosts("./hf", str(tmp_path / "lab.yaml"))
    assert f"{tmp_path / 'hf'}:2: one host (or host list) a line" in str(info.value)
    assert "resources.procs_per_node" in str(info.value)


def test_site_errors_point_at_the_profile_line(tmp_path):
    err = refused(tmp_path, "hosts: ws[1-2],ws1\n")
    assert err.where == f"{tmp_path / 'lab.yaml'}:3" and "named twice" in err.what
    err = refused(tmp_path, "cpu_mode: 'on'\n")
    assert "names no hosts" in err.what and "hosts: ws[1-4]" in err.fix
    err = refused(tmp_path, "hosts: ws1\nssh: {options: [ProxyCommand=nc %h %p]}\n")
    assert "ssh.options entry" in err.what  # spaces: not one -o word
    err = refused(tmp_path, "hosts: ws1\nssh: {options: ['ProxyCommand=/bin/evil']}\n")
    assert "runs a program" in err.fix and "~/.ssh/config" in err.fix
    err = refused(tmp_path, "hosts: ws1\nssh: {options: [BatchMode=no]}\n")
    assert "sets BatchMode itself" in err.fix
    err = refused(tmp_path, "hosts: ws1\nssh: {options: [Port=2222]}\n")
    assert err.fix == "use ssh.port for it"
    err = refused(tmp_path, "hosts: ws1\nssh: {identity: '~/my key'}\n")
    assert "ssh.identity" in err.what and err.where.endswith(":4") and "~/.ssh/id_ed25519" in err.fix
    err = refused(tmp_path, "hosts: ws1\nssh: {user: '-oX'}\n")
    assert "is not a user name" in err.what


def test_more_nodes_than_hosts_is_refused_at_load(tmp_path):
    err = refused(tmp_path, "hosts: ws[1-2]\ncpu_mode: 'on'\n", resources={"nodes": 3})
    assert "site 'lab' has 2 host(s): ws[1-2]" in err.what and "ask for 2 or fewer" in err.fix


def test_a_key_of_scheduler_ssh_on_a_slurm_site_is_refused(tmp_path):
    path = tmp_path / "slurmy.yaml"
    path.write_text("name: slurmy\nscheduler: slurm\nhosts: ws[1-2]\n")
    with pytest.raises(HpctrainError) as info:
        load_job(dict(JOB), site=str(path))
    assert "'hosts' is read by scheduler 'ssh' only" in info.value.what
    assert info.value.fix == "remove 'hosts', or set scheduler: ssh"


def test_the_plan_takes_the_first_nodes_hosts(tmp_path):
    job = load(tmp_path, "hosts: ws[1-4]\ncpu_mode: 'on'\n", resources={"nodes": 2})
    plan = make_plan(job, "/runs/x")
    assert plan.scheduler["hosts"] == ["ws1", "ws2"] and plan.nnodes == 2
    assert plan.scheduler["ssh"][0] == "ssh" and "BatchMode=yes" in plan.scheduler["ssh"]


# ----------------------------------------------------------------------------- the command line

def _opts(**kw):
    base = dict(user=None, port=None, identity=None, known_hosts=None, host_key="strict",
                connect_timeout=10, options=[])
    return SimpleNamespace(**{**base, **kw})


def test_ssh_words_batch_mode_and_the_sites_settings():
    words = openssh.ssh_words(_opts(user="me", port=2222, identity="~/.ssh/id_lab",
                                    host_key="accept-new", options=["Compression=yes"]))
    text = " ".join(words)
    assert words[:3] == ["ssh", "-o", "Compression=yes"]  # first: ssh keeps the first value
    for part in ("-o BatchMode=yes", "-o ConnectTimeout=10", "-o StrictHostKeyChecking=accept-new",
                 "-o IdentityFile=~/.ssh/id_lab -o IdentitiesOnly=yes", "-p 2222", "-l me",
                 "ServerAliveInterval=15"):
        assert part in text
    ignore = " ".join(openssh.ssh_words(_opts(host_key="ignore")))
    assert "StrictHostKeyChecking=no" in ignore and "UserKnownHostsFile=/dev/null" in ignore


def test_one_connection_per_host_and_settings(tmp_path, monkeypatch):
    a = openssh.Ssh(openssh.ssh_words(_opts(user="a")))
    b = openssh.Ssh(openssh.ssh_words(_opts(user="b")))
    cmd = a.command("ws1", ["bash", "-c", "echo 'it''s' $HOME"])
    assert "ControlMaster=auto" in cmd and cmd[-2:] == ["ws1", "bash -c 'echo '\"'\"'it'\"'\"''\"'\"'s'\"'\"' $HOME'"]
    assert cmd[cmd.index("--") - 1] != ""  # the host comes after --: never read as an option
    path_a = next(w for w in cmd if w.startswith("ControlPath="))
    path_b = next(w for w in b.command("ws1", ["true"]) if w.startswith("ControlPath="))
    assert path_a != path_b and len(path_a) < 60  # another login, another socket; a short path


def test_rsync_shell_doubles_quotes_inside_its_own():
    assert openssh.rsync_shell(["ssh", "-o", "IdentityFile=/k/it's"]) == \
        "'ssh' '-o' 'IdentityFile=/k/it''s'"


# ----------------------------------------------------------------------------- ssh's failures

@pytest.mark.parametrize("stderr,what,fix", [
    ("ssh: Could not resolve hostname wsx: Name or service not known",
     "host 'wsx' does not resolve", "check the name in the site's hosts"),
    ("ssh: connect to host wsx port 22: Connection refused",
     "wsx refuses ssh connections", "start the ssh server (sshd) on wsx"),
    ("ssh: connect to host wsx port 22: Connection timed out",
     "wsx did not answer ssh within 5 s", "ssh.connect_timeout sets the wait"),
    ("root@wsx: Permission denied (publickey).",
     "wsx rejected the ssh login", "ssh-copy-id"),
    ("Host key verification failed.",
     "the host key of wsx is not known here", "ssh.host_key: accept-new"),
    ("@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @",
     "the host key of wsx has changed", "ssh-keygen -R wsx"),
    ("", "ssh to wsx failed: ssh exited 255 and said nothing", "ssh wsx true"),
])
def test_ssh_failures_explained(stderr, what, fix):
    got_what, got_fix = openssh.explain("wsx", stderr, 5)
    assert what in got_what and fix in got_fix


def test_a_remote_commands_failure_is_its_own_words():
    r = openssh.Result("ws2", 3, "", "python: not found\n")
    assert openssh.problem(r)[0] == "ws2: exit status 3: python: not found"


def test_the_shells_id_is_written_after_its_pid(tmp_path):
    """hpctrain records the shell once its id file appears and reads the pid file then: the pid
    must already be whole. The host's side of the command runs here, true in place of the
    interactive bash; where the pid cannot be written (a folder in its place), no id appears."""
    import shlex
    import subprocess
    from hpctrain.backends.ssh.backend import SHELL_PID, SshBackend
    plan = make_plan(load(tmp_path, "hosts: ws[1-2]\n", resources={"nodes": 2}), "/runs/x")
    record = tmp_path / "allocation"
    command = SshBackend().shell_command(plan, tmp_path / "rc", record)
    assert command[-3:-1] == ["--", "ws1"] and "-t" in command
    host_side = shlex.split(command[-1])  # what the host's login shell runs
    assert host_side[-4:] == ["bash", "--rcfile", str(tmp_path / "rc"), "-i"]
    proc = subprocess.run(host_side[:-4] + ["true"])
    pid, start = (tmp_path / SHELL_PID).read_text().split()
    assert proc.returncode == 0 and record.read_text() == f"ws1:{pid}\n" and start.isdigit()

    record.unlink()
    (tmp_path / SHELL_PID).unlink()
    (tmp_path / SHELL_PID).mkdir()
    assert subprocess.run(host_side[:-4] + ["true"], stderr=subprocess.DEVNULL).returncode != 0
    assert not record.exists()

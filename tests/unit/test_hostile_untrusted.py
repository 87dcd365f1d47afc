"""Hostile on-disk state (issue 27): run directories, run.json and site files are untrusted data.

Every class here is a family of generated variants, run in this process (nothing is started:
a check that let one through would be caught by the assertions, and the CLI-level runs of a
representative set are in tests/local/test_hostile_untrusted_cli.py):

- records:   run.json values that would be a command (login-node and ssh-host runs' ssh lines,
             hosts, login), an id with a newline or a quote, a count of 10^9, a wrong shape —
             each an HpctrainError naming run.json and the key, from every command's first step
             (Run.record, backends.for_run);
- fifos:     a named pipe, a directory, /dev/zero, a socket in place of each file status/logs
             read — an answer or an HpctrainError, within seconds;
- hostfiles: an ssh site's hosts file that is /dev/zero, a pipe, the process environment, or
             names 10^8 hosts — refused, within seconds, never printing the environment;
- sbatch:    values YAML 1.1 changes (booleans spelt yes/on/off, 010, 0x1f, 1_000, 30:00) and
             every prefix of an option hpctrain owns — refused at load with the fix;
- after:     a waited-for run whose job id carries a newline or a directive — refused;
- pickles:   a function run's result pickle that would run code when unpickled — its state is
             decided without running it;
- snapshot:  symbolic links out of the tree, to directories, dangling; pipes and sockets.
"""
from __future__ import annotations

import json
import os
import pickle
import socket
from pathlib import Path

import pytest

from hpctrain.backends import for_run
from hpctrain.backends.ssh import openssh
from hpctrain.errors import HpctrainError
from hpctrain.runs.records import Run
from tests.hostile import CONTROL, canary_payloads, tried, within

RUN_ID = "20240101-000000-abcd"




def _run_dir(tmp_path: Path, **fields) -> Path:
    d = tmp_path / "runs" / "x" / RUN_ID
    (d / "status").mkdir(parents=True, exist_ok=True)
    (d / "logs").mkdir(exist_ok=True)
    rec = dict(run_id=RUN_ID, name="x", site="local", backend="local", job_id="local-1",
               state="RUNNING", script="job.sh")
    rec.update(fields)
    (d / "run.json").write_text(json.dumps(rec))
    return d


def _refused(d: Path, key: str) -> HpctrainError:
    with pytest.raises(HpctrainError) as info:
        run = Run(d)
        run.record  # noqa: B018
        for_run(run)
    text = str(info.value)
    assert "run.json" in text and key in text, text
    return info.value


# ----------------------------------------------------------------------------- records

# What submit writes for a site's default ssh: section (a record holds exactly that).
SSH_OK = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR",
          "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4",
          "-o", "StrictHostKeyChecking=yes"]


def _record_variants(canary: str) -> dict[str, tuple[dict, str]]:
    """name -> (run.json fields, the key the error must name)."""
    out: dict[str, tuple[dict, str]] = {}
    commands = [["sh", "-c", f"touch {canary}"], ["bash", "-c", f"touch {canary}"],
                [f"touch {canary}"], ["/usr/bin/env", "touch", canary], ["ssh2", "-o", "BatchMode=yes"],
                ["SSH", "-o", "BatchMode=yes"], [], "ssh -o BatchMode=yes", None, 5, {"a": 1}]
    options = [f"ProxyCommand=touch {canary}", f"LocalCommand=touch {canary}",
               "PermitLocalCommand=yes", f"KnownHostsCommand=/bin/touch {canary}",
               "Include=/etc/passwd", f"PKCS11Provider={canary}", "Match=all",
               f"ControlPath={canary}", "ControlMaster=yes", "BatchMode=no", f"RemoteCommand=touch {canary}",
               "ProxyCommand touch x", "-oProxyCommand=x", "Ciphers=a b", "a\nb=c"]
    flags = [["-F", canary], ["-i", canary], ["-E", canary], ["-W", "h:1"], ["-L", "1:h:2"],
             ["-p", "0"], ["-p", "99999"], ["-p", "22;x"], ["-l", "-oProxyCommand=x"],
             ["-l", "a b"], ["-o"], ["-v", "-v"]]
    for i, words in enumerate(commands):
        out[f"remote.ssh command {i}"] = ({"remote": {"login": "h", "ssh": words, "path": "/r"}},
                                          "remote.ssh")
        out[f"ssh.ssh command {i}"] = ({"backend": "ssh", "ssh": {"hosts": ["h"], "ssh": words}},
                                       "ssh.ssh")
    for i, option in enumerate(options):
        words = [*SSH_OK, "-o", option]
        out[f"remote.ssh option {i}"] = ({"remote": {"login": "h", "ssh": words, "path": "/r"}},
                                         "remote.ssh")
        out[f"ssh.ssh option {i}"] = ({"backend": "ssh", "ssh": {"hosts": ["h"], "ssh": words}},
                                      "ssh.ssh")
    for i, flag in enumerate(flags):
        words = [*SSH_OK, *flag]
        out[f"remote.ssh flag {i}"] = ({"remote": {"login": "h", "ssh": words, "path": "/r"}},
                                       "remote.ssh")
    for i, payload in enumerate(canary_payloads(canary) + CONTROL):
        out[f"remote.login {i}"] = ({"remote": {"login": payload, "ssh": SSH_OK, "path": "/r"}},
                                    "remote.login")
        out[f"ssh.hosts {i}"] = ({"backend": "ssh", "ssh": {"hosts": [payload], "ssh": SSH_OK}},
                                 "ssh.hosts")
        if not payload.startswith("/") or any(c in payload for c in " \n\t\x00"):
            out[f"remote.path {i}"] = ({"remote": {"login": "h", "ssh": SSH_OK, "path": payload}},
                                       "remote.path")
        if payload[:1].isalnum() and all(c.isalnum() or c in "._:@+-" for c in payload):
            continue  # a valid id
        out[f"job_id {i}"] = ({"job_id": payload}, "job_id")
        out[f"after.job_id {i}"] = ({"after": [{"mode": "afterok", "run_id": "r", "path": "/r",
                                                "job_id": payload}]}, "after[0].job_id")
        out[f"jobs {i}"] = ({"jobs": ["12", payload]}, "jobs[1]")
        out[f"run_id {i}"] = ({"run_id": payload}, "run_id")
    for key in ("array_size", "ntasks", "nodes", "procs_per_node", "parallel", "pid"):
        for value in (10**9, 2**63, -1, *([] if key == "pid" else [10**6])):
            out[f"count {key} {value}"] = ({key: value}, key)
    for i, shape in enumerate([[1], [["j", "COMPLETED"]], [["j", 5, 0]], [["j", "X", "0"]],
                               "x", [None], [[None, None, None]], [["j", "X", 0, 1]]]):
        out[f"task_states {i}"] = ({"task_states": shape, "final": True}, "task_states")
    for i, after in enumerate([[1], [{"mode": "afterok"}], "x", [{"mode": 1, "run_id": "r",
                                                                   "path": "/", "job_id": "1"}]]):
        out[f"after shape {i}"] = ({"after": after}, "after")
    for key, value in (("backend", "pbs"), ("backend", "../../x"), ("backend", ""),
                       ("scheduler", "pbs"), ("backend", "x" * 5000), ("name", "a\nb"),
                       ("state", "\x1b[31m"), ("reason", "x" * 10_000), ("ssh", "not a mapping"),
                       ("remote", ["h"]), ("connect_timeout_remote", None)):
        if key == "connect_timeout_remote":
            out["remote.connect_timeout"] = ({"remote": {"login": "h", "ssh": SSH_OK, "path": "/r",
                                                         "connect_timeout": 10**12}},
                                             "remote.connect_timeout")
            continue
        out[f"{key} {str(value)[:12]!r}"] = ({key: value}, key)
    out["ssh.hosts 10^5"] = ({"backend": "ssh", "ssh": {"hosts": ["h"] * 100_000, "ssh": SSH_OK}},
                             "ssh.hosts")
    return out


def test_hostile_records_are_errors_naming_the_file_and_key(tmp_path, home):
    canary = tmp_path / "CANARY"
    variants = _record_variants(str(canary))
    assert len(variants) > 300
    for name, (fields, key) in variants.items():
        tried("records")
        d = _run_dir(tmp_path, **fields)
        with within():
            _refused(d, key)
        assert not canary.exists(), name


def test_what_hpctrain_writes_passes_the_checks(tmp_path, home):
    """The checks refuse the hostile, not what submit records: a login-node and an ssh record."""
    from hpctrain.schema.spec import SshOptions
    words = openssh.ssh_words(SshOptions(user="me", port=2222, identity="~/.ssh/id_ed25519",
                                         host_key="accept-new", options=["Ciphers=aes128-ctr"]))
    d = _run_dir(tmp_path, backend="slurm", job_id="1234", remote={
        "login": "login1.example.org", "ssh": words, "connect_timeout": 10, "path": "/scratch/r/x"})
    assert for_run(Run(d)).far["login"] == "login1.example.org"
    d = _run_dir(tmp_path, backend="ssh", job_id="ws1:4321",
                 ssh={"hosts": ["ws1", "10.0.0.7"], "ssh": words, "sync": "rsync",
                      "connect_timeout": 10})
    for_run(Run(d))


# ----------------------------------------------------------------------------- fifos

READ_FILES = ["run.json", "status/exit_code", "status/pid", "status/progress-0.json",
              "status/failure.json", "status/failures.jsonl", "status/rank-0.json",
              "status/rank-0.failed.json", "status/excluded.json", "logs/job.out",
              "logs/rank-0.log"]
KINDS = ["fifo", "dev-zero", "socket", "directory", "huge"]


def _plant(path: Path, kind: str) -> object:
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "socket":
        import tempfile
        s = socket.socket(socket.AF_UNIX)
        short = tempfile.mktemp(prefix="h27-", dir="/tmp")  # a socket path holds <= 107 bytes
        s.bind(short)
        os.rename(short, path)
        return s
    elif kind == "directory":
        path.mkdir()
    elif kind == "huge":  # sparse: claims 64 GiB, costs nothing
        with open(path, "wb") as f:
            f.truncate(64 << 30)
    return None


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rel", READ_FILES)
def test_special_files_in_a_run_directory_never_hang(rel, kind, tmp_path, home):
    from hpctrain.follow import logs
    from hpctrain.follow.status import gather
    d = _run_dir(tmp_path, final=False)
    sock = _plant(d / rel, kind)
    out: list[str] = []
    steps = [lambda: gather(Run(d))]
    if not (kind == "huge" and rel.startswith("logs/")):  # a huge log is streamed, not refused
        steps += [lambda: logs.read(Run(d), write=out.append),
                  lambda: logs.read(Run(d), write=out.append, rank=0)]
    try:
        for step in steps:
            tried("fifos")
            with within(15):
                try:
                    step()
                except HpctrainError as exc:
                    assert str(exc) and "Traceback" not in str(exc)
        assert sum(map(len, out)) <= 80 << 20  # a huge log is not read whole into memory at once
    finally:
        if sock is not None:
            sock.close()


# ----------------------------------------------------------------------------- hostfiles

def _hostfile_variants(tmp_path: Path) -> dict[str, str]:
    out = {"dev-zero": "/dev/zero", "dev-urandom": "/dev/urandom", "environ": "/proc/self/environ",
           "proc-environ-pid": f"/proc/{os.getpid()}/environ", "proc-cmdline": "/proc/self/cmdline",
           "dev-stdin": "/dev/stdin", "directory": str(tmp_path)}
    fifo = tmp_path / "hosts.fifo"
    os.mkfifo(fifo)
    out["fifo"] = str(fifo)
    link = tmp_path / "hosts.link"
    link.symlink_to("/proc/self/environ")
    out["link to environ"] = str(link)
    big = tmp_path / "hosts.big"
    with open(big, "wb") as f:
        f.truncate(8 << 30)
    out["sparse 8 GiB"] = str(big)
    for i, text in enumerate(["x[1-100000000]\n", "a[1-10000]b[1-10000]\n",
                              "n[000000001-999999999]\n", "\n".join(f"h[1-999]{i}x" for i in range(200)),
                              "".join(f"h{i}\n" for i in range(20_000)),
                              "r[1-101]n[1-100]\n"]):
        p = tmp_path / f"hosts.{i}"
        p.write_text(text)
        out[f"many hosts {i}"] = str(p)
    for i, text in enumerate([f"SECRET_TOKEN=s3cr3t-{i} other", "SECRET_TOKEN=s3cr3t-x\n",
                              "a\x00SECRET_TOKEN=s3cr3t-y\n", "ok1\nSECRET_TOKEN=s3cr3t-z[1-2]\n",
                              "h\x1b]0;SECRET_TOKEN=s3cr3t\x07\n"]):
        p = tmp_path / f"env.{i}"
        p.write_text(text)
        out[f"secret-like {i}"] = str(p)
    return out


def test_hostile_hostfiles_are_refused_quickly_and_never_echo_secrets(tmp_path, home, monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "s3cr3t-environment-value")
    variants = _hostfile_variants(tmp_path)
    for name, path in variants.items():
        tried("hostfiles")
        with within(15):
            with pytest.raises(ValueError) as info:
                openssh.site_hosts(path, str(tmp_path / "site.yaml"))
        text = str(info.value)
        assert "s3cr3t" not in text and "SECRET_TOKEN" not in text, (name, text)
        assert len(text) < 600, (name, text)
    # Through a site profile, as `validate` reads it: the same, as an HpctrainError.
    from hpctrain.job.load import load_job
    for name in ("environ", "fifo", "many hosts 0", "secret-like 1"):
        tried("hostfiles")
        site = tmp_path / f"site-{name.replace(' ', '-')}.yaml"
        site.write_text(f"name: hs\nscheduler: ssh\nhosts: {json.dumps(variants[name])}\n")
        with within(15), pytest.raises(HpctrainError) as info:
            load_job({"name": "x", "script": "t.py"}, site=str(site))
        assert "s3cr3t" not in str(info.value)


# ----------------------------------------------------------------------------- sbatch

YAML11 = ["yes", "no", "on", "off", "Yes", "NO", "On", "OFF", "010", "0o17", "0x1f", "0b101",
          "1_000", "+12", "1.0e3", ".inf", "-.Inf", ".NaN", "30:00", "1:30:00", "16:00",
          "190:20:30", "1_0.5", "0010"]


def _load(tmp_path: Path, sbatch_yaml: str):
    from hpctrain.job.load import load_job
    jf = tmp_path / "job.yaml"
    jf.write_text(f"name: x\nscript: t.py\nsbatch: {sbatch_yaml}\n")
    return load_job(str(jf), site="localcluster")


def test_sbatch_values_yaml_would_change_are_refused(tmp_path, home):
    import yaml
    for text in YAML11:
        for form in ("{{comment: {v}}}", "{{begin: {v}}}", "{{mail-type: [END, {v}]}}",
                     "{{nice: {v}}}"):
            tried("sbatch")
            if isinstance(yaml.safe_load(text), str):
                continue
            with pytest.raises(HpctrainError) as info:
                _load(tmp_path, form.format(v=text))
            assert "quote it" in str(info.value) or "expected" in str(info.value), str(info.value)
    # As written: passed on unchanged.
    for text in ('"30:00"', "'on'", "true", "10", "END"):
        _load(tmp_path, f"{{comment: {text}}}")


def test_every_prefix_of_an_owned_option_is_refused(tmp_path, home):
    from hpctrain.job.sbatch_options import KNOWN, OWNED
    prefixes = sorted({o[:n] for o in OWNED for n in range(2, len(o))} - KNOWN)
    assert len(prefixes) > 100
    for prefix in prefixes:
        tried("sbatch")
        with pytest.raises(HpctrainError) as info:
            _load(tmp_path, f"{{'{prefix}': '1'}}")
        assert "abbreviation" in str(info.value) or "sets" in str(info.value), prefix


# ----------------------------------------------------------------------------- after

def test_after_never_takes_a_hostile_job_id(tmp_path, home):
    from hpctrain.job.load import load_job
    canary = tmp_path / "CANARY"
    payloads = [p for p in canary_payloads(str(canary)) + CONTROL] + ["12\n#SBATCH --wrap=id",
                                                                     "12 --x", "1_2", "12:13", "-1"]
    for i, payload in enumerate(payloads):
        tried("after")
        d = _run_dir(tmp_path, backend="slurm", job_id=payload, final=True, state="COMPLETED")
        with pytest.raises(HpctrainError) as info:
            load_job({"name": "y", "script": "t.py", "after": str(d)}, site="localcluster")
        assert "job_id" in str(info.value) or "job id" in str(info.value), str(info.value)
    assert not canary.exists()


# ----------------------------------------------------------------------------- pickles

class _Touch:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_function_run_state_never_unpickles(tmp_path, home):
    from hpctrain.backends.submitit import outcome_word
    from hpctrain.follow.status import gather
    canary = tmp_path / "CANARY"
    payloads = {
        "reduce first": pickle.dumps((_Touch(canary), 1)),
        "reduce value": pickle.dumps(("success", _Touch(canary))),
        "error value": pickle.dumps(("error", _Touch(canary))),
        "garbage": b"\x80\x05garbage",
        "empty": b"",
        "global": b"cos\nsystem\n(S'touch " + str(canary).encode() + b"'\ntR.",
    }
    for proto in range(0, pickle.HIGHEST_PROTOCOL + 1):
        payloads[f"reduce p{proto}"] = pickle.dumps((_Touch(canary), "success"), protocol=proto)
        payloads[f"success p{proto}"] = pickle.dumps(("success", _Touch(canary)), protocol=proto)
    for name, data in payloads.items():
        tried("pickles")
        d = _run_dir(tmp_path, backend="submitit", kind="function", job_id="4321", ntasks=1,
                     final=False, submitit_folder="/etc")
        (d / "submitit").mkdir(exist_ok=True)
        (d / "submitit" / "4321_0_result.pkl").write_bytes(data)
        word = outcome_word(d / "submitit" / "4321_0_result.pkl")
        assert word in (None, "success", "error"), name
        st = gather(Run(d))
        assert st.state.done, name
        assert not canary.exists(), name


# ----------------------------------------------------------------------------- snapshot

def _tree(tmp_path: Path, variant: str) -> Path:
    root = tmp_path / f"tree-{variant}"
    outside = tmp_path / f"outside-{variant}"
    (outside / "inner").mkdir(parents=True)
    (outside / "inner" / "f.txt").write_text("data")
    (outside / "g.txt").write_text("g")
    (root / "sub").mkdir(parents=True)
    (root / "a.py").write_text("a")
    (root / "sub" / "b.py").write_text("b")
    rel_out = os.path.relpath(outside, root)
    links = {
        "rel-dir-out": (root / "data", rel_out),
        "abs-dir-out": (root / "data", str(outside)),
        "rel-file-out": (root / "sub" / "g", os.path.join("..", rel_out, "g.txt")),
        "abs-file-out": (root / "g", str(outside / "g.txt")),
        "rel-file-in": (root / "sub" / "a", "../a.py"),
        "abs-file-in": (root / "sub" / "a", str(root / "a.py")),
        "rel-dir-in": (root / "sub2", "sub"),
        "abs-dir-in": (root / "sub2", str(root / "sub")),
        "dangling": (root / "nowhere", "../does-not-exist"),
        "dir-link-to-link": (root / "d2", rel_out + "/inner"),
        "chain": (root / "c1", "a.py"),
    }
    link, target = links[variant]
    link.symlink_to(target)
    return root


SNAPSHOT_VARIANTS = ["rel-dir-out", "abs-dir-out", "rel-file-out", "abs-file-out", "rel-file-in",
                     "abs-file-in", "rel-dir-in", "abs-dir-in", "dangling", "dir-link-to-link",
                     "chain"]


@pytest.mark.parametrize("variant", SNAPSHOT_VARIANTS)
def test_snapshot_outside_git_never_leaves_a_dangling_link(variant, tmp_path):
    from hpctrain.runs.snapshot import CODE_DIR, collect, copy
    from hpctrain.schema.spec import Snapshot
    tried("snapshot")
    root = _tree(tmp_path, variant)
    source = collect(str(root), Snapshot(), [])
    run_dir = tmp_path / "run"
    copy(source, run_dir)
    code = run_dir / CODE_DIR
    for d, dirs, files in os.walk(code):
        for name in dirs + files:
            p = Path(d) / name
            if p.is_symlink():
                real = os.path.realpath(p)
                assert os.path.exists(p), f"{p} dangles"
                assert real.startswith(str(code.resolve())), f"{p} points out of the copy: {real}"
    if variant in ("rel-dir-out", "abs-dir-out"):
        assert (code / "data" / "inner" / "f.txt").read_text() == "data"
    if variant == "dir-link-to-link":
        assert (code / "d2" / "f.txt").read_text() == "data"


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_snapshot_refuses_pipes_and_sockets_clearly(kind, tmp_path):
    from hpctrain.runs.snapshot import collect
    from hpctrain.schema.spec import Snapshot
    tried("snapshot")
    root = tmp_path / "tree"
    root.mkdir()
    (root / "a.py").write_text("a")
    sock = _plant(root / "thing", kind)
    try:
        with pytest.raises(HpctrainError) as info:
            collect(str(root), Snapshot(), [])
        assert "thing" in str(info.value) and "snapshot.exclude" in str(info.value)
    finally:
        if sock is not None:
            sock.close()


# ----------------------------------------------------------------------------- messages
# The unclear messages of issue 27: each names the argument or key the user must change, with
# the fix, for every variant of the mistake.

_SET_MISTAKES = [("foo.bar=1", "unknown key 'foo'"), ("nme.x=2", "unknown key 'nme'"),
                 ("resources.gpu.x=1", "unknown key 'gpu'"), ("name.x=1", "'name'"),
                 ("seed.a.b=1", "'seed'"), ("resources.nodes.x=1", "'resources.nodes'"),
                 ("launcher.zzz=1", "unknown key 'zzz'"), ("env.A.B=1", "'env")]


@pytest.mark.parametrize("arg,what", _SET_MISTAKES)
def test_a_bad_set_argument_is_named_not_the_job_file(arg, what, tmp_path, home):
    from hpctrain.job.load import load_job
    job = tmp_path / "job.yaml"
    job.write_text("name: a\nscript: t.py\nseed: 1\nresources: {nodes: 1}\nenv: {A: x}\n")
    with pytest.raises(HpctrainError) as err:
        load_job(str(job), site="localcluster", overrides=[arg])
    assert err.value.where == f"--set {arg}", (arg, err.value.where, err.value.what)
    assert what in err.value.what and err.value.fix
    tried("messages")


@pytest.mark.parametrize("key", ["mem", "mem_per_cpu"])
@pytest.mark.parametrize("value", [4, 64, 4096, 0])
def test_a_memory_size_without_unit_gets_the_fix(key, value, tmp_path, home):
    from hpctrain.job.load import load_job
    job = tmp_path / "job.yaml"
    job.write_text(f"name: a\nscript: t.py\nresources: {{{key}: {value}}}\n")
    with pytest.raises(HpctrainError) as err:
        load_job(str(job), site="localcluster")
    assert err.value.where == f"{job}:3" and f"{key}: {value}G" in err.value.fix
    tried("messages")


@pytest.mark.parametrize("site", [{"name": "x", "scheduler": "local"}, 3, ["local"], b"local",
                                  object(), True])
def test_load_job_site_must_be_a_name_or_a_path(site, home):
    from hpctrain.job.load import load_job
    with pytest.raises(HpctrainError) as err:
        load_job({"name": "a", "script": "t.py"}, site=site)
    assert "site= takes a site name or the path" in err.value.what and err.value.fix
    tried("messages")


def test_load_job_site_may_be_a_path_object(tmp_path, home):
    from hpctrain.datafiles import data_dir
    from hpctrain.job.load import load_job
    job = load_job({"name": "a", "script": "t.py"}, site=data_dir("site_configs") / "local.yaml")
    assert job.site.name == "local"

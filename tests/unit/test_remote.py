"""Submitting through a login node, the pure parts: the site keys, the command line that reaches
the login node (byte-exact quoting), the run directory and the code that is copied."""
from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from hpctrain.backends.slurm import login as remote
from hpctrain.errors import HpctrainError
from hpctrain.job.load import load_job
from hpctrain.submission import prepare

SITE = {"name": "far", "scheduler": "slurm", "login": "me@login.example.org",
        "ssh": {"identity": "/keys/id", "port": 2222}, "remote": {"runs_dir": "/scratch/me/runs"}}


def sites(tmp_path, monkeypatch, **over) -> Path:
    d = tmp_path / "sites"
    d.mkdir(exist_ok=True)
    doc = dict(SITE, **over)
    for key, value in over.items():
        if value is None:
            doc.pop(key)
    (d / "far.yaml").write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("HPCTRAIN_SITE_PATH", str(d))
    return d


def job_path(tmp_path) -> Path:
    p = tmp_path / "job.yaml"
    p.write_text(yaml.safe_dump({"name": "j", "library": "command", "script": "train.py",
                                 "secrets": ["TOKEN"]}))
    return p


def test_prepare_puts_the_run_on_the_cluster_and_the_mirror_here(tmp_path, home, monkeypatch):
    sites(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    prep = prepare(load_job(job_path(tmp_path), site="far"), run_id="RID")
    assert prep.run_dir == Path("/scratch/me/runs/j/RID")
    assert prep.mirror == Path(tmp_path / "runs" / "j" / "RID")
    assert prep.submit_command == ["ssh", "me@login.example.org", "--", "sbatch", "--parsable",
                                   "/scratch/me/runs/j/RID/job.sbatch"]
    assert "cd /scratch/me/runs/j/RID/code\n" in prep.script  # the code's copy, not this directory
    assert str(tmp_path) not in prep.script
    assert prep.plan.python == ["python3"]  # the cluster's, not this machine's interpreter
    assert prep.job.workdir == str(tmp_path)  # what run.json records as the code's origin


def test_the_command_reaches_the_login_node_quoted_word_by_word():
    far = remote.far_record(_site(), Path("/scratch/me/runs/j/RID"))
    login = remote.Login(far)
    words = ["sbatch", "--parsable", "/scratch/it's here/$(reboot)/job.sbatch", "a b", ""]
    command = login.ssh.command(login.host, words)
    assert command[:1] == ["ssh"] and command[-3:-1] == ["--", "login.example.org"]
    assert command[-1] == shlex.join(words)
    assert shlex.split(command[-1]) == words  # what a POSIX remote shell reads back, byte for byte
    for expected in (["-l", "me"], ["-p", "2222"], ["-o", "IdentityFile=/keys/id"]):
        assert any(command[i:i + 2] == expected for i in range(len(command)))
    assert "ControlMaster=auto" in command and "BatchMode=yes" in command
    assert any(w.startswith("ControlPath=/tmp/hpctrain-ssh-") for w in command)


def test_secrets_travel_on_stdin_not_on_the_command_line(monkeypatch):
    login = remote.Login(remote.far_record(_site(), Path("/r"))).with_env({"TOKEN": "s3cr3t value"})
    seen = {}

    def run(host, words, input=None, timeout=0):
        seen.update(words=words, input=input)
        from hpctrain.backends.ssh.openssh import Result
        return Result(host, 0, "42\n", "")
    monkeypatch.setattr(login.ssh, "run", run)
    assert login.tool(["sbatch", "--parsable", "/r/job.sbatch"]) == "42\n"
    assert "s3cr3t" not in " ".join(seen["words"])
    assert seen["input"] == b"TOKEN\0s3cr3t value\0"
    # The remote side: bash reads the pairs into its environment, then runs the command.
    script = seen["words"][2]
    out = subprocess.run(["bash", "-c", script, "hpctrain", "bash", "-c", 'printf %s "$TOKEN"'],
                         input=seen["input"], capture_output=True).stdout
    assert out == b"s3cr3t value"


@pytest.mark.parametrize("over, key, words", [
    ({"login": "me@-oProxyCommand=x"}, "login", "is not user@host"),
    ({"remote": None}, "login", "needs remote.runs_dir"),
    ({"remote": {"runs_dir": "relative/runs"}}, "remote.runs_dir", "not an absolute path"),
    ({"ssh": {"user": "other"}}, "ssh.user", "name the user once"),
    ({"ssh": {"options": ["ProxyCommand=nc %h %p"]}}, "ssh.options", "refused"),
    ({"login": None}, "remote", "read only with 'login:'"),
    ({"scheduler": "local"}, "ssh", "uses scheduler 'local'"),
])
def test_site_errors_name_the_key_and_a_fix(tmp_path, home, monkeypatch, over, key, words):
    """key: where the mistake is (the error names the profile file and its line)."""
    sites(tmp_path, monkeypatch, **over)
    with pytest.raises(HpctrainError) as err:
        load_job(job_path(tmp_path), site="far")
    assert words in str(err.value), str(err.value)
    assert err.value.fix and "far.yaml" in str(err.value.where)


def test_code_files_follow_gitignore_excludes_and_skip_the_runs_dir(tmp_path):
    d = tmp_path / "proj"
    (d / "pkg").mkdir(parents=True)
    (d / "data").mkdir()
    (d / "runs" / "j").mkdir(parents=True)
    for name in ("train.py", "pkg/mod.py", "data/big.bin", "model.ckpt", "runs/j/run.json",
                 "notes.tmp"):
        (d / name).write_text("x" * 10)
    (d / ".gitignore").write_text("*.tmp\n")
    subprocess.run(["git", "init", "-q", str(d)], check=True)
    files, total = remote.code_files(str(d), ["data/", "*.ckpt"], [d / "runs"])
    assert files == [".gitignore", "pkg/mod.py", "train.py"]
    assert total == 10 + 10 + len("*.tmp\n")
    # Not a checkout: every file, still without the excluded ones and the runs directory.
    (d / ".git").rename(tmp_path / "moved.git")
    files, _ = remote.code_files(str(d), ["data/", "*.ckpt"], [d / "runs"])
    assert files == [".gitignore", "notes.tmp", "pkg/mod.py", "train.py"]


def test_code_over_the_cap_is_refused_with_the_largest_files(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"x" * 3 * 1048576)
    with pytest.raises(HpctrainError) as err:
        remote.check_code_size(str(tmp_path), ["a.bin"], 3 * 1048576, 2, "site.yaml:3")
    assert "3.0 MiB in 1 files" in err.value.what and "a.bin (3.0 MiB)" in err.value.what
    assert "remote.code_max_mb" in err.value.fix


def test_python_mismatch_is_named_before_submitting():
    with pytest.raises(HpctrainError) as err:
        remote._check_python("3.9", ["python3"], None)
    assert "cluster's Python is 3.9" in err.value.what and "cannot be unpickled" in err.value.what


def _site():
    from hpctrain.schema.spec import SiteProfile
    import msgspec
    return msgspec.convert(SITE, SiteProfile)

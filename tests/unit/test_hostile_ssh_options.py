"""Hostile ssh options (issue 39, item 1): nothing a site profile or a run record says can make
the reader's ssh run a program, hand anything over, go to another host or trust another key.

ssh reads each `-o` word as a line of ssh_config(5): the keyword in any case, its value after
whitespace or one `=`, quoted or not, `-o` glued to it or not, and the first value given wins.
Every dangerous keyword (DANGEROUS) in every one of those spellings (spellings) is refused:
- in a site profile's ssh.options, at load (`validate`, `site`), one HpctrainError at the
  entry's file:line, for both readers of the ssh: section (scheduler: ssh and a login node);
- in a run record (run.json's `ssh.ssh` and `remote.ssh`), before, among and after hpctrain's
  own options, and every ssh flag that is not one hpctrain writes — through `status`, `logs` and
  `cancel` of the real CLI (in this process): exit 2, one `error:` line naming run.json and the
  key, and the canary programs the options name (ProxyCommand runs before any connection) and a
  planted XAuthLocation, with DISPLAY set, never run.
What hpctrain itself writes for every allowed option still passes, and every ssh it runs turns
off forwarding whatever ~/.ssh/config says. (The real attack, XAuthLocation with ForwardX11 to a
real sshd: tests/ssh/test_ssh_errors.py.)
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from hpctrain.backends import for_run
from hpctrain.backends.ssh import openssh, options
from hpctrain.cli import main
from hpctrain.errors import HpctrainError
from hpctrain.job import sites
from hpctrain.runs.records import Run
from hpctrain.schema.spec import SshOptions
from tests.hostile import tried

RUN_ID = "20240101-000000-abcd"

# keyword -> a value that does harm ({canary}: a program that creates the canary file).
DANGEROUS = {
    # runs a program here (or reads more configuration)
    "ProxyCommand": "{canary}", "LocalCommand": "{canary}", "PermitLocalCommand": "yes",
    "KnownHostsCommand": "{canary}", "XAuthLocation": "{canary}", "PKCS11Provider": "{canary}",
    "SmartcardDevice": "{canary}", "SecurityKeyProvider": "{canary}", "Include": "/etc/passwd",
    "Match": "exec {canary}", "Host": "*", "EnableSSHKeysign": "yes",
    "HostbasedAuthentication": "yes", "IgnoreUnknown": "*", "RemoteCommand": "{canary}",
    # hands something over, opens this machine's network
    "ForwardX11": "yes", "ForwardX11Trusted": "yes", "ForwardX11Timeout": "0", "ForwardAgent": "yes",
    "SendEnv": "*", "SetEnv": "A=b", "LocalForward": "8022", "RemoteForward": "8022",
    "DynamicForward": "1080", "PermitRemoteOpen": "any", "GatewayPorts": "yes", "Tunnel": "yes",
    "TunnelDevice": "any:any", "GSSAPIDelegateCredentials": "yes", "IdentityAgent": "/tmp/agent",
    "AddKeysToAgent": "yes", "ExitOnForwardFailure": "no", "ClearAllForwardings": "no",
    "StreamLocalBindUnlink": "yes",
    # sends the connection elsewhere
    "Hostname": "evil.example", "ProxyJump": "evil.example", "ProxyUseFdpass": "yes",
    "CanonicalizeHostname": "yes", "CanonicalDomains": "evil.example", "HostKeyAlias": "login1",
    "BindAddress": "10.0.0.1", "ControlPath": "/tmp/shared-%C", "ControlMaster": "yes",
    "ControlPersist": "yes",
    # changes trust
    "StrictHostKeyChecking": "no", "UserKnownHostsFile": "/dev/null",
    "GlobalKnownHostsFile": "/dev/null", "IdentityFile": "/tmp/k", "CertificateFile": "/tmp/c",
    "VerifyHostKeyDNS": "yes", "UpdateHostKeys": "yes", "CheckHostIP": "no",
    "NoHostAuthenticationForLocalhost": "yes", "HostKeyAlgorithms": "+ssh-rsa",
    "KexAlgorithms": "+diffie-hellman-group1-sha1", "MACs": "+hmac-md5",
    "PubkeyAcceptedAlgorithms": "+ssh-rsa", "IdentitiesOnly": "no",
    # weakens what hpctrain relies on, or is an allowed keyword with a harmful value
    "BatchMode": "no", "LogLevel": "DEBUG3", "RequestTTY": "force", "SessionType": "none",
    "StdinNull": "yes", "ForkAfterAuthentication": "yes", "ConnectTimeout": "0", "Port": "2222",
    "User": "root", "ServerAliveInterval": "0", "Ciphers": "+3des-cbc", "Compression": "YES x",
    "PreferredAuthentications": "hostbased", "IPQoS": "af11 af11", "EscapeChar": "~",
    "Protocol": "1",
}
# ssh's flags that hpctrain never writes (ssh(1)), each with a value where it takes one.
FLAGS = [["-F", "{canary}"], ["-J", "evil.example"], ["-W", "h:22"], ["-L", "8022:h:22"],
         ["-R", "8022"], ["-D", "1080"], ["-A"], ["-X"], ["-Y"], ["-i", "/tmp/k"],
         ["-S", "/tmp/sock"], ["-E", "/tmp/log"], ["-G"], ["-M"], ["-N"], ["-T"], ["-t"], ["-v"],
         ["-g"], ["-f"], ["-n"], ["-s"], ["-K"], ["-k"], ["-I", "{canary}"], ["-w", "any"],
         ["-O", "exit"], ["-Q", "cipher"], ["-P", "tag"], ["-c", "3des-cbc"], ["-m", "hmac-md5"],
         ["-b", "10.0.0.1"], ["-B", "lo"], ["-e", "none"], ["-oProxyCommand={canary}"],
         ["-oForwardX11=yes"], ["-l", "-oProxyCommand={canary}"], ["-p", "22 -oX"], ["--"],
         ["evil.example"]]


def spellings(key: str, value: str) -> list[list[str]]:
    """One option as ssh would read it, in the ways ssh accepts (each a list of words: the last
    one is a key and its value split across two words)."""
    return [[f"{key}={value}"], [f"{key.lower()}={value}"], [f"{key.upper()}={value}"],
            [f"{key[0].lower()}{key[1:]}={value}"], [f"{key} {value}"], [f"{key} = {value}"],
            [f"{key}\t{value}"], [f"-o{key}={value}"], [f"-o {key}={value}"], [f'"{key}"={value}'],
            [f'{key}="{value}"'], [f"{key}=={value}"], [f" {key}={value}"], [key, value]]


def _canary_program(tmp_path: Path) -> tuple[Path, Path]:
    """A program that would create the canary file if anything ran it."""
    canary = tmp_path / "CANARY"
    program = tmp_path / "plant.sh"
    program.write_text(f"#!/bin/sh\ntouch {canary}\n")
    program.chmod(0o755)
    return program, canary


# ----------------------------------------------------------------------------- site profiles

SITE_KINDS = {
    "ssh": {"name": "lab", "scheduler": "ssh", "hosts": "ws[1-2]"},
    "login": {"name": "far", "scheduler": "slurm", "login": "me@login1.example.org",
              "remote": {"runs_dir": "/scratch/me/runs"}},
}


def _site(tmp_path: Path, kind: str, n: int, ssh: dict) -> Path:
    path = tmp_path / f"{kind}-{n}.yaml"
    path.write_text(yaml.safe_dump({**SITE_KINDS[kind], "ssh": ssh}, sort_keys=False))
    return path


def _site_refused(path: Path) -> HpctrainError:
    with pytest.raises(HpctrainError) as info:
        sites.load(str(path))
    return info.value


def test_every_dangerous_option_in_every_spelling_is_refused_as_a_site_option(tmp_path):
    program, _ = _canary_program(tmp_path)
    for key, value in DANGEROUS.items():
        for words in spellings(key, value.format(canary=program)):
            tried("ssh options")
            assert options.option_problem(words[0]) is not None, words


@pytest.mark.parametrize("kind", sorted(SITE_KINDS))
def test_a_site_profile_with_a_dangerous_option_is_refused_at_load(kind, tmp_path):
    """Through the loader `validate` and `site` use, for both readers of the ssh: section: each
    dangerous keyword once, in the spellings in turn."""
    program, canary = _canary_program(tmp_path)
    for n, (key, value) in enumerate(DANGEROUS.items()):
        all_words = spellings(key, value.format(canary=program))
        words = all_words[n % len(all_words)]
        tried("ssh options")
        path = _site(tmp_path, kind, n, {"connect_timeout": 5,
                                         "options": ["Compression=yes", *words]})
        err = _site_refused(path)
        # One error at the refused entry's line (the one after Compression=yes), naming it,
        # with a fix.
        line = path.read_text().splitlines().index("  - Compression=yes") + 2
        assert err.where == f"{path}:{line}", (words, err.where)
        assert err.fix and "\n" not in err.what + err.fix, (words, str(err))
        if "\t" in words[0]:  # refused as a control character, as in every field
            assert "'ssh.options.1' holds the control character" in err.what, str(err)
        else:
            assert f"ssh.options entry {words[0][:20]!r}"[:-1] in err.what, (words, str(err))
    assert not canary.exists()


def test_a_site_refusal_says_why_and_the_fix(tmp_path):
    cases = {"XAuthLocation=/tmp/x": "runs a program", "xauthLOCATION=/tmp/x": "runs a program",
             "SendEnv=*": "hands over", "ForwardAgent yes": "hands over",
             "-oProxyJump=evil": "another host than the one named",
             "HostKeyAlias=login1": "another host than the one named",
             "VerifyHostKeyDNS=yes": "which host keys or identities are trusted",
             "SmartcardDevice=/tmp/x.so": "runs a program", "Frobnicate=1": "not one of the options",
             "ServerAliveInterval=0": "takes 1 to 9999", "Compression yes": "Key=value, one word",
             "BatchMode=no": "sets BatchMode itself", "StrictHostKeyChecking=no": "ssh.host_key",
             "IdentityFile=/tmp/k": "ssh.identity", "UserKnownHostsFile=/dev/null": "ssh.known_hosts"}
    for i, (option, says) in enumerate(cases.items()):
        err = _site_refused(_site(tmp_path, "ssh", i, {"options": [option]}))
        assert says in f"{err.what} {err.fix}", (option, str(err))
        if "not one of" in says or "runs a program" in says:
            assert "~/.ssh/config" in err.fix and "ServerAliveInterval" in err.fix


@pytest.mark.parametrize("key, value, says", [
    ("identity", "/keys/${AWS_SECRET_ACCESS_KEY}", "no space, quote, % or $"),
    ("identity", "%d/.ssh/id", "no space, quote, % or $"),
    ("identity", "~/my key", "no space, quote, % or $"),
    ("known_hosts", '/x/"known_hosts"', "no space, quote, % or $"),
    ("known_hosts", "~/.bashrc", "its name must hold 'known_hosts'"),
    ("known_hosts", "~/.ssh/authorized_keys", "its name must hold 'known_hosts'"),
])
def test_the_typed_paths_cannot_expand_the_environment_or_write_elsewhere(key, value, says,
                                                                           tmp_path):
    """ssh expands ${VAR} in these paths (into its error message, in a shared job log) and
    appends accepted host keys to known_hosts (accept-new, ignore)."""
    tried("ssh options")
    err = _site_refused(_site(tmp_path, "ssh", 0, {key: value, "host_key": "accept-new"}))
    assert f"ssh.{key}" in err.what and says in err.fix, str(err)


def test_a_known_hosts_link_to_another_file_or_a_pipe_as_a_key_is_refused(tmp_path):
    (tmp_path / "bashrc").write_text("")
    (tmp_path / "lab_known_hosts").symlink_to(tmp_path / "bashrc")
    err = _site_refused(_site(tmp_path, "login", 0, {"known_hosts": str(tmp_path / "lab_known_hosts")}))
    assert "and so must a link's target" in err.fix
    os.mkfifo(tmp_path / "id_fifo")
    err = _site_refused(_site(tmp_path, "login", 1, {"identity": str(tmp_path / "id_fifo")}))
    assert "a regular file" in err.fix


# ----------------------------------------------------------------------------- run records

OK_WORDS = openssh.ssh_words(SshOptions(user="me", port=2222, host_key="accept-new",
                                        known_hosts="~/.ssh/known_hosts",
                                        identity="~/.ssh/id_ed25519", options=["Compression=yes"]))
OWN = OK_WORDS.index("BatchMode=yes") - 1  # where hpctrain's own options begin


def _forged(words: list[str]) -> list[list[str]]:
    """The record's words with `words` put before, among and after hpctrain's own options."""
    return [[*OK_WORDS[:OWN], *words, *OK_WORDS[OWN:]], [*OK_WORDS[:OWN + 4], *words,
                                                         *OK_WORDS[OWN + 4:]], [*OK_WORDS, *words]]


def _run_dir(tmp_path: Path, kind: str, words: list[str]) -> Path:
    d = tmp_path / "runs" / "x" / RUN_ID
    (d / "status").mkdir(parents=True, exist_ok=True)
    (d / "logs").mkdir(exist_ok=True)
    rec = {"run_id": RUN_ID, "name": "x", "site": "lab", "script": "job.sh", "state": "RUNNING"}
    if kind == "ssh":
        rec.update(backend="ssh", job_id="ws1:4321", pid=4321,
                   ssh={"hosts": ["ws1"], "ssh": words, "sync": "shared", "connect_timeout": 5})
    else:
        rec.update(backend="slurm", job_id="1234", remote={
            "login": "login1.example.org", "ssh": words, "connect_timeout": 5, "path": "/r/x"})
    (d / "run.json").write_text(json.dumps(rec))
    return d


def _record_refused(d: Path, kind: str) -> str:
    with pytest.raises(HpctrainError) as info:
        for_run(Run(d))
    text = str(info.value)
    assert f"{d / 'run.json'}: '{'ssh.ssh' if kind == 'ssh' else 'remote.ssh'}" in text, text
    return text


def test_every_dangerous_option_flag_and_spelling_is_refused_in_a_record_line(tmp_path):
    """run.json's ssh line, checked word by word: every keyword in every spelling, `-o` apart
    or glued, before, among and after hpctrain's own options; every flag hpctrain never writes."""
    program, _ = _canary_program(tmp_path)
    variants = []
    for key, value in DANGEROUS.items():
        for words in spellings(key, value.format(canary=program)):
            for option_words in (["-o", *words], [f"-o{words[0]}", *words[1:]]):
                variants += _forged(option_words)
    for flag in FLAGS:
        variants += _forged([w.format(canary=program) for w in flag])
    assert len(variants) > 6000
    for forged in variants:
        tried("ssh options")
        with pytest.raises(ValueError) as info:
            openssh.checked_words(forged, "run.json: 'ssh.ssh'")
        assert str(info.value).startswith("run.json: 'ssh.ssh'"), str(info.value)


@pytest.mark.parametrize("kind", ["ssh", "login"])
def test_a_record_with_a_dangerous_option_is_refused_by_every_command(kind, tmp_path):
    """Through for_run, the first step of every command that reads a run: each keyword once (the
    spellings and places in turn), and each flag."""
    program, canary = _canary_program(tmp_path)
    for n, (key, value) in enumerate(DANGEROUS.items()):
        all_words = spellings(key, value.format(canary=program))
        words = ["-o", *all_words[n % len(all_words)]]
        tried("ssh options")
        _record_refused(_run_dir(tmp_path, kind, _forged(words)[n % 3]), kind)
    for n, flag in enumerate(FLAGS):
        tried("ssh options")
        forged = _forged([w.format(canary=program) for w in flag])[n % 3]
        _record_refused(_run_dir(tmp_path, kind, forged), kind)
    assert not canary.exists()


def test_a_record_refusal_names_the_option_and_why(tmp_path):
    for words, says in ([["-o", "XAuthLocation=/tmp/x"], "'XAuthLocation=/tmp/x' is refused: "
                         "XAuthLocation runs a program"],
                        [["-o", "SendEnv=*"], "'SendEnv=*' is refused: SendEnv hands over"],
                        [["-J", "evil"], "'-J' is not an option hpctrain writes"],
                        [["-o", "ServerAliveInterval=0"], "'-o ServerAliveInterval=0' where "
                         "hpctrain writes nothing more"]):
        text = _record_refused(_run_dir(tmp_path, "ssh", [*OK_WORDS, *words]), "ssh")
        assert says in text and "restore run.json" in text, text
    # A trusted-looking line that is not exactly what hpctrain writes (an option twice, moved).
    moved = [*OK_WORDS[:OWN], "-o", "StrictHostKeyChecking=no", *OK_WORDS[OWN:]]
    assert "StrictHostKeyChecking" in _record_refused(_run_dir(tmp_path, "ssh", moved), "ssh")
    twice = [*OK_WORDS, "-o", "UserKnownHostsFile=/dev/null"]
    assert "is not an ssh command line hpctrain writes" in _record_refused(
        _run_dir(tmp_path, "login", twice), "login")


ALLOWED_VALUES = {"ServerAliveInterval": "30", "ServerAliveCountMax": "3",
                  "ConnectionAttempts": "2", "TCPKeepAlive": "no", "Compression": "yes",
                  "AddressFamily": "inet", "IPQoS": "throughput",
                  "Ciphers": "aes128-gcm@openssh.com,aes256-ctr",
                  "PreferredAuthentications": "gssapi-with-mic,publickey",
                  "PubkeyAuthentication": "yes", "PasswordAuthentication": "no",
                  "KbdInteractiveAuthentication": "no", "GSSAPIAuthentication": "yes",
                  "IdentitiesOnly": "yes"}


@pytest.mark.parametrize("host_key", ["strict", "accept-new", "ignore"])
def test_what_hpctrain_writes_for_every_allowed_option_passes(host_key, tmp_path):
    assert sorted(ALLOWED_VALUES) == sorted(a.spelling for a in options.ALLOWED.values())
    site = {"options": [f"{k}={v}" for k, v in ALLOWED_VALUES.items()], "host_key": host_key,
            "identity": "~/.ssh/id_ed25519", "user": "me", "port": 2222, "connect_timeout": 7}
    for kind in SITE_KINDS:
        profile, _ = sites.load(str(_site(tmp_path, kind, 0, site)))
        words = openssh.ssh_words(profile.ssh)
        assert openssh.checked_words(words, "x") == words
        for_run(Run(_run_dir(tmp_path, kind, words)))


def test_every_ssh_hpctrain_runs_lends_the_host_nothing(tmp_path):
    """The host may come from a record someone else wrote: whatever the reader's ~/.ssh/config
    says for `Host *`, no agent, X11, port, tunnel or local command (ssh keeps the first value,
    and no site or record may give these keywords)."""
    ssh = openssh.Ssh(OK_WORDS, 5)
    command = ssh.command("ws1", ["true"])
    before_host = command[:command.index("--")]
    for option in ("ForwardAgent=no", "ForwardX11=no", "ClearAllForwardings=yes",
                   "PermitLocalCommand=no", "Tunnel=no"):
        assert option in before_host
        assert options.refusal(option) is not None  # a site can never give it first
    assert all(w in openssh.rsync_shell([*ssh.words, *ssh.sharing]) for w in ("'ForwardAgent=no'",))


# ----------------------------------------------------------------------------- a note, not an error

# What hpctrain gives every ssh itself, as a site file written for an older hpctrain may say it.
SAME = ["BatchMode=yes", "batchmode=YES", "LogLevel=ERROR", "LogLevel=error", "ForwardAgent=no",
        "forwardagent=NO", "ForwardX11=no", "ClearAllForwardings=yes", "PermitLocalCommand=no",
        "Tunnel=no"]


def _job(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text("")
    path = tmp_path / "job.yaml"
    path.write_text("name: j\nscript: train.py\n")
    return path


@pytest.mark.parametrize("kind", sorted(SITE_KINDS))
def test_an_option_hpctrain_already_sets_is_accepted_with_a_note(kind, tmp_path, monkeypatch,
                                                                  home):
    """IdentitiesOnly=yes (hpctrain sets it with ssh.identity) and each option hpctrain gives
    every ssh with the same value: the site loads, each entry is named once, at its line, in
    the job's warnings (`validate` and `submit` print them); the ones hpctrain writes itself are
    left out of the command line, which run records still read back exactly."""
    from hpctrain.job.load import load_job
    monkeypatch.chdir(tmp_path)
    tried("ssh options", len(SAME) + 1)
    path = _site(tmp_path, kind, 0, {"identity": "~/.ssh/id_lab",
                                     "options": ["IdentitiesOnly=yes", "Compression=yes", *SAME]})
    lines = path.read_text().splitlines()
    job = load_job(str(_job(tmp_path)), site=str(path))
    notes = [w for w in job.warnings if "ssh.options entry" in w]
    assert len(notes) == len(SAME) + 1, job.warnings
    first = lines.index("  - IdentitiesOnly=yes") + 1
    assert notes[0] == (f"{path}:{first}: ssh.options entry IdentitiesOnly=yes: hpctrain sets it "
                        "itself with ssh.identity; remove it")
    for n, option in enumerate(SAME):
        ours = options.same_as_ours(option)
        assert ours.lower() == option.lower() and ours in notes[n + 1], (option, notes[n + 1])
        assert notes[n + 1].startswith(f"{path}:{first + 2 + n}: "), notes[n + 1]
    profile, _ = sites.load(str(path))
    words = openssh.ssh_words(profile.ssh)
    assert words[:5] == ["ssh", "-o", "IdentitiesOnly=yes", "-o", "Compression=yes"]
    assert words.count("BatchMode=yes") == 1 and "batchmode=YES" not in words
    assert not any(w.lower() in ("forwardagent=no", "tunnel=no") for w in words)
    assert openssh.checked_words(words, "x") == words
    for_run(Run(_run_dir(tmp_path, kind, words)))


def test_identitiesonly_alone_passes_and_its_other_values_stay_refused(tmp_path):
    """Without ssh.identity it only narrows the keys ssh offers: allowed, no note; `no`, and
    every other value of the options hpctrain sets, stay refused."""
    profile, _ = sites.load(str(_site(tmp_path, "ssh", 0, {"options": ["IdentitiesOnly=yes"]})))
    assert options.notes(profile.ssh) == []
    assert openssh.ssh_words(profile.ssh)[1:3] == ["-o", "IdentitiesOnly=yes"]
    for i, option in enumerate(["IdentitiesOnly=no", "BatchMode=no", "LogLevel=DEBUG3",
                                "ForwardAgent=yes", "ClearAllForwardings=no", "Tunnel=yes",
                                "BatchMode yes", "ForwardAgent=no x"]):
        tried("ssh options")
        err = _site_refused(_site(tmp_path, "ssh", i + 1, {"options": [option]}))
        assert "is refused" in err.what, (option, str(err))
    # A record is still read word by word: what hpctrain writes first is never a site's.
    assert options.refusal("BatchMode=yes") is not None


# ----------------------------------------------------------------------------- the CLI

CLI_CASES = {
    "XAuthLocation": ["-o", "ForwardX11=yes", "-o", "XAuthLocation={program}"],
    "xauthlocation lower": ["-o", "forwardx11=yes", "-o", "xauthlocation={program}"],
    "XAuthLocation spaced": ["-o", "ForwardX11 yes", "-o", "XAuthLocation {program}"],
    "XAuthLocation glued": ["-oForwardX11=yes", "-oXAuthLocation={program}"],
    "XAuthLocation split": ["-o", "ForwardX11", "yes", "-o", "XAuthLocation", "{program}"],
    "-X": ["-X", "-o", "XAuthLocation={program}"],
    "ProxyCommand": ["-o", "ProxyCommand={program}"],
    "PROXYCOMMAND": ["-o", "PROXYCOMMAND {program}"],
    "LocalCommand": ["-o", "PermitLocalCommand=yes", "-o", "LocalCommand={program}"],
    "KnownHostsCommand": ["-o", "KnownHostsCommand={program}"],
    "SendEnv": ["-o", "SendEnv=*"], "SetEnv": ["-o", "SetEnv=TOKEN=x"],
    "ForwardAgent": ["-o", "ForwardAgent=yes"], "-A": ["-A"],
    "Hostname": ["-o", "Hostname=evil.example"], "ProxyJump": ["-o", "ProxyJump=evil.example"],
    "-J": ["-J", "evil.example"], "-W": ["-W", "evil.example:22"],
    "RemoteForward": ["-o", "RemoteForward=8022"], "-R": ["-R", "8022"],
    "-L": ["-L", "8022:localhost:22"], "-D": ["-D", "1080"],
    "PermitRemoteOpen": ["-o", "PermitRemoteOpen=any"], "GatewayPorts": ["-o", "GatewayPorts=yes"],
    "Tunnel": ["-o", "Tunnel=yes"], "StrictHostKeyChecking": ["-o", "StrictHostKeyChecking=no"],
    "UserKnownHostsFile": ["-o", "UserKnownHostsFile=/dev/null"],
    "IdentityFile": ["-o", "IdentityFile=/tmp/k"], "-i": ["-i", "/tmp/k"],
    "-F": ["-F", "{program}"], "-S": ["-S", "/tmp/sock"], "Include": ["-o", "Include={program}"],
    "PKCS11Provider": ["-o", "PKCS11Provider={program}"],
}


@pytest.mark.parametrize("kind", ["ssh", "login"])
def test_status_logs_cancel_of_a_forged_record_run_nothing(kind, tmp_path, home, capsys,
                                                          monkeypatch):
    """The real CLI's commands that read a run directory: exit 2, one error line naming
    run.json and the key; the planted program never runs (with DISPLAY set, as an X session)."""
    program, canary = _canary_program(tmp_path)
    monkeypatch.setenv("DISPLAY", ":0")
    key = "ssh.ssh" if kind == "ssh" else "remote.ssh"
    for name, words in CLI_CASES.items():
        forged = [*OK_WORDS, *[w.format(program=program) for w in words]]
        d = _run_dir(tmp_path, kind, forged)
        for args in (["status", str(d)], ["logs", str(d)], ["cancel", str(d)]):
            tried("ssh options")
            assert main(args) == 2, (name, args)
            out, err = capsys.readouterr()
            lines = err.splitlines()
            assert lines[0].startswith("error: ") and f"run.json: '{key}" in lines[0], (name, err)
            assert all(line.startswith("  ") for line in lines[1:]), (name, err)  # where, fix
            assert "Traceback" not in err and str(program) not in out
        assert not canary.exists(), name
        assert json.loads((d / "run.json").read_text()).get("cancelled") is None  # untouched


def test_the_manual_lists_every_allowed_option():
    """The site reference (generated from the schema's descriptions, kept current by
    test_reference) names each allowed option in the row of ssh.options."""
    reference = Path(__file__).parents[2] / "docs" / "reference" / "site.md"
    row = next(line for line in reference.read_text().splitlines()
               if line.startswith("| `ssh.options` |"))
    for allowed in options.ALLOWED.values():
        assert allowed.spelling in row, allowed.spelling

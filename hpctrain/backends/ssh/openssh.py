"""OpenSSH, scheduler-neutral: the hosts a site names, the ssh command line, many hosts at once.

Nothing here knows a scheduler or a template: the ssh backend (backend.py) uses it, and so may
anything else in hpctrain that reaches a machine over ssh (submitting from a laptop to a login
node). ssh_words(site.ssh) -> the command line; Ssh(words).run / run_many / rsync -> results;
explain / problem -> (what went wrong, the fix).

- Hosts: a Slurm-style list (`ws[1-4]`, backends/ssh/hostlist.py), a YAML list (each entry may be such a list
  too) or a hostfile (a path: the value holds a "/"; one host or host list a line, `#` comments),
  each name held to a strict pattern: a host name or an IPv4 address, never an option.
- The command line (options.py): always batch mode (no password or passphrase prompt can hang
  a submit or a job), the site's user, port, identity, known-hosts file, host-key policy,
  connect timeout and the few extra options an allowlist lets a site give; keep-alives, so that
  a host that dies mid-run ends its ssh session within a minute instead of never. Nothing a
  site profile or a run record says can make ssh run a program here, forward, redirect the
  connection or trust another host key; the user's own ~/.ssh/config is the place for more.
- One connection per host (ControlMaster, ControlPersist): every command to a host rides on
  it, so a 16-host job opens 16 connections however many commands hpctrain sends. The socket
  directory is short (a Unix socket path holds at most 107 bytes) and this user's alone.
- What ssh prints when it cannot get in becomes a clear error naming the host and the fix.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import NamedTuple

from ...errors import HpctrainError
from ...rank import tools
from ..commands import SchedulerError

HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")
MAX_HOSTFILE = 1 << 20


# ----------------------------------------------------------------------------- hosts

def hostfile_path(value: str, site_source: str) -> Path:
    """A hostfile named in a site profile: relative to the profile's directory."""
    path = Path(os.path.expanduser(value))
    if not path.is_absolute():
        path = Path(site_source).parent / path
    return path


MAX_HOSTS = 10_000  # one torchrun per host: far above any ssh site, far below a memory problem
_SYSTEM = ("/proc/", "/sys/", "/dev/")


def _line_problem(at: str, line: str, why: str) -> ValueError:
    """A hostfile line refused, shown as a short, printable excerpt only: a site is shared and a
    hostfile may be any file (never a secret printed to a terminal or a CI log)."""
    from ...runs.untrusted import excerpt
    shown = "" if "=" in line or not line.isprintable() else f" ({excerpt(line, 24)})"
    return ValueError(f"{at}: {why}{shown}")


def read_hostfile(path: Path) -> str:
    """A hostfile's text: a regular file of at most 1 MiB, UTF-8, never a system file (/proc,
    /sys, /dev: the process environment is no hosts file). ValueError says what is wrong,
    without its content."""
    from ...runs.untrusted import Unreadable, read_regular
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        real = str(path)
    if real.startswith(_SYSTEM) or real in ("/proc", "/sys", "/dev"):
        raise ValueError(f"the hostfile {path} is a system file ({real}), not a list of hosts")
    try:
        data = read_regular(path, MAX_HOSTFILE)
    except FileNotFoundError:
        raise ValueError(f"the hostfile {path} does not exist") from None
    except Unreadable as exc:
        raise ValueError(f"the hostfile {exc.strerror} (at most 1 MiB)" if "larger" in exc.strerror
                         else f"the hostfile {exc.strerror}") from None
    except OSError as exc:
        raise ValueError(f"cannot read the hostfile {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"the hostfile {path} is not UTF-8 text") from None
    if "\0" in text:
        raise ValueError(f"the hostfile {path} holds NUL bytes: it is not a text file of hosts")
    return text


def site_hosts(value, site_source: str) -> list[str]:
    """Every host a site's `hosts:` names, in order, at most MAX_HOSTS. ValueError says what is
    wrong (a hostfile's lines only as short, printable excerpts)."""
    from .hostlist import count, expand
    if isinstance(value, list):
        if len(value) > MAX_HOSTS:
            raise ValueError(f"the list names {len(value)} hosts, more than {MAX_HOSTS}")
        items = [(str(v), f"entry {i}") for i, v in enumerate(value)]
    elif "/" in value:
        path = hostfile_path(value, site_source)
        text = read_hostfile(path)
        items = []
        # Lines end at "\n" alone (str.splitlines also ends them at \x85, \x1c..\x1e, \v, \f,
        # U+2028: control characters that must be refused as a host name, not read as breaks).
        for n, line in enumerate(text.split("\n"), 1):
            line = line.split("#", 1)[0].strip()
            if line:
                if len(line.split()) > 1:
                    raise _line_problem(f"{path}:{n}", line, "one host (or host list) a line "
                                        "(resources.procs_per_node sets the ranks per host)")
                items.append((line, f"{path}:{n}"))
        if not items:
            raise ValueError(f"the hostfile {path} names no host")
    else:
        items = [(value, "")]
    hosts: list[str] = []
    total = 0
    for text, at in items:
        try:
            total += count(text)
            if total > MAX_HOSTS:
                raise ValueError(f"more than {MAX_HOSTS} hosts are named (one torchrun per host)")
            names = expand(text)
        except ValueError as exc:
            if "/" in at:  # a hostfile's line: its content only as a short excerpt
                why = "is not a host list" if "invalid hostlist" in str(exc) else str(exc)
                raise _line_problem(at, text, why) from None
            raise ValueError(f"{at + ': ' if at else ''}{exc}") from None
        for name in names:
            if not HOST.fullmatch(name):
                from ...runs.untrusted import excerpt
                problem = "is not a host name or IPv4 address (letters, digits, '.' and '-', " \
                          "not first or last)"
                if "/" in at:
                    raise _line_problem(at, name, problem)
                raise ValueError(f"{at + ': ' if at else ''}{excerpt(name, 60)} {problem}")
        hosts += names
    if not hosts:
        raise ValueError("no host is named")
    seen: set[str] = set()
    for name in hosts:
        if name in seen:
            raise ValueError(f"{name} is named twice: one torchrun per host")
        seen.add(name)
    return hosts


# ----------------------------------------------------------------------------- options

# What a site's ssh: section and a run record may make ssh do: backends/ssh/options.py.
from .options import check_section, checked_words, site_notes, ssh_words  # noqa: E402,F401


def checked_host(host, where: str) -> str:
    if not (isinstance(host, str) and HOST.fullmatch(host)):
        shown = host[:60] if isinstance(host, str) else type(host).__name__
        raise ValueError(f"{where}: {shown!r} is not a host name")
    return host


def checked_timeout(value, where: str) -> int | None:
    if value is not None and not (type(value) is int and 1 <= value <= 86400):
        raise ValueError(f"{where}: {str(value)[:20]!r} is not a timeout in seconds (1..86400)")
    return value


def rsync_shell(words: list[str]) -> str:
    """A command for rsync's -e: rsync splits it at spaces and reads single quotes itself, a
    quote inside one doubled (not a shell's rules)."""
    return " ".join("'" + w.replace("'", "''") + "'" for w in words)


# ----------------------------------------------------------------------------- errors

def explain(host: str, stderr: str, connect_timeout: int | None = None) -> tuple[str, str]:
    """(what went wrong, the fix) for ssh's exit status 255 and what it printed."""
    said = " ".join(stderr.split()) or "ssh exited 255 and said nothing"
    if "Could not resolve hostname" in said or "Name or service not known" in said \
            or "name resolution" in said:
        return (f"host '{host}' does not resolve ({said})",
                "check the name in the site's hosts, or make it resolve here (/etc/hosts, DNS, "
                "a Host entry in ~/.ssh/config)")
    if "Connection refused" in said:
        return (f"{host} refuses ssh connections ({said})",
                f"start the ssh server (sshd) on {host}, or set ssh.port to the port it listens on")
    if "timed out" in said or "No route to host" in said or "unreachable" in said:
        wait = f" within {connect_timeout} s" if connect_timeout else ""
        return (f"{host} did not answer ssh{wait} ({said})",
                f"check that {host} is up and reachable from here (ssh.connect_timeout sets the wait)")
    if "Permission denied" in said or "Too many authentication failures" in said:
        return (f"{host} rejected the ssh login ({said})",
                f"add your public key to ~/.ssh/authorized_keys on {host} (ssh-copy-id), or set "
                "ssh.user / ssh.identity; hpctrain never asks for a password (batch mode)")
    if "IDENTIFICATION HAS CHANGED" in said:
        return (f"the host key of {host} has changed ({said[:200]})",
                f"if that is expected (reinstalled), remove the old key: ssh-keygen -R {host}")
    if "Host key verification failed" in said or "host key is known" in said:
        return (f"the host key of {host} is not known here ({said})",
                f"connect once by hand (ssh {host}) and accept it, add it with ssh-keyscan, or "
                "set ssh.host_key: accept-new in the site")
    return f"ssh to {host} failed: {said}", f"try `ssh {host} true` by hand with the site's ssh settings"


# ----------------------------------------------------------------------------- running

class Result(NamedTuple):
    host: str
    status: int  # the remote command's exit status; 255: ssh itself failed
    stdout: str
    stderr: str


def control_dir() -> str:
    """Where this user's connection sockets live: short, private, this user's own."""
    path = f"/tmp/hpctrain-ssh-{os.getuid()}"
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise HpctrainError(f"cannot create {path} for ssh's connection sockets: {exc.strerror}",
                            fix="make /tmp writable for you") from None
    st = os.lstat(path)
    import stat
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise HpctrainError(f"{path} is not a private directory of yours: another user could "
                            "take over your ssh connections through it",
                            fix=f"remove it (rm -r {path}); hpctrain makes it again, mode 700")
    return path


class Ssh:
    """The ssh command line of one site (its words), with one shared connection per host."""

    def __init__(self, words: list[str], connect_timeout: int | None = None):
        import hashlib
        from .options import NEVER
        self.words = list(words)
        self.connect_timeout = connect_timeout
        # One connection per host and ssh settings: a site with another key or user to the same
        # host gets a connection of its own, not one that logged in differently. Before it,
        # nothing of this machine is lent to the host (NEVER), whatever ~/.ssh/config says.
        tag = hashlib.sha1("\0".join(self.words).encode()).hexdigest()[:8]
        self.sharing = [*NEVER, "-o", "ControlMaster=auto",
                        "-o", f"ControlPath={control_dir()}/{tag}-%C", "-o", "ControlPersist=60"]

    def command(self, host: str, remote: list[str]) -> list[str]:
        # The remote side's login shell reads the command: every word single-quoted (POSIX
        # quoting, which bash, zsh, dash, fish and tcsh all read the same).
        return [*self.words, *self.sharing, "--", host, shlex.join(remote)]

    def run(self, host: str, remote: list[str], input: bytes | None = None,
            timeout: float = 120) -> Result:
        command = self.command(host, remote)
        try:
            proc = tools.run(command, timeout, input=input if input is not None else b"")
        except FileNotFoundError:
            raise SchedulerError(command[:1], None, "'ssh' is not installed here",
                                 fix="install OpenSSH's client (Debian: openssh-client)") from None
        except subprocess.TimeoutExpired:
            return Result(host, 255, "", f"ssh to {host} did not finish within {timeout:.0f} s")
        except OSError as exc:  # it printed without end (tools.ToolOutputTooLarge), or no fork
            return Result(host, 255, "", f"ssh to {host}: {exc}")
        return Result(host, proc.returncode, proc.stdout.decode(errors="replace"),
                      proc.stderr.decode(errors="replace"))

    def run_many(self, commands: dict[str, list[str]], input: bytes | None = None,
                 timeout: float = 120) -> dict[str, Result]:
        """One command per host, all at once; the results by host."""
        from concurrent.futures import ThreadPoolExecutor
        if not commands:
            return {}
        with ThreadPoolExecutor(max_workers=min(64, len(commands))) as pool:
            futures = {host: pool.submit(self.run, host, remote, input, timeout)
                       for host, remote in commands.items()}
            return {host: f.result() for host, f in futures.items()}

    def rsync(self, host: str, source: str, target: str, excludes: list[str] = (),
              pull: bool = False, timeout: float = 3600) -> Result:
        """Copy the directory `source` to `target` on the host (same path meaning), or back with
        pull. -s: the paths travel in rsync's protocol, not through the remote shell."""
        shell = rsync_shell([*self.words, *self.sharing])
        far = f"{host}:{(source if pull else target).rstrip('/')}/"
        near = f"{(target if pull else source).rstrip('/')}/"
        command = ["rsync", "-a", "-s", "-e", shell, *[f"--exclude={e}" for e in excludes]]
        if pull:
            command += ["-u", far, near]  # -u: a newer file here (run.json) is never overwritten
        else:
            command += [near, far]
        try:
            proc = tools.run(command, timeout)
        except FileNotFoundError:
            raise HpctrainError("'rsync' is not installed here, and the site says sync: rsync",
                                fix="install rsync (Debian: rsync), here and on every host") from None
        except subprocess.TimeoutExpired:
            return Result(host, 255, "", f"rsync with {host} did not finish within {timeout:.0f} s")
        except OSError as exc:
            return Result(host, 255, "", f"rsync with {host}: {exc}")
        return Result(host, proc.returncode, proc.stdout.decode(errors="replace"),
                      proc.stderr.decode(errors="replace"))


def problem(result: Result, connect_timeout: int | None = None) -> tuple[str, str]:
    """(what, fix) for a result that failed: ssh's own failure explained, or what the remote
    command said."""
    if result.status == 255:
        return explain(result.host, result.stderr, connect_timeout)
    said = " ".join((result.stdout + "\n" + result.stderr).split())
    return (f"{result.host}: exit status {result.status}: {said[-400:] or 'nothing printed'}",
            "see the message above")

"""What a site profile and a run record may make OpenSSH do: an allowlist, never a denylist.

A site profile is shared, untrusted input, and a run record (run.json) may be written by anyone
who can write the runs directory; both end up on the command line of the reader's own ssh. ssh
reads `-o` as one line of ssh_config(5): the keyword case-insensitive, split from its value at
whitespace or one `=`, quotes read, several values for some keywords, aliases and deprecated
names (SmartcardDevice is PKCS11Provider), and the first value given wins. Dozens of keywords
run a program here (ProxyCommand, LocalCommand, KnownHostsCommand, XAuthLocation with
ForwardX11, PKCS11Provider, SecurityKeyProvider, Match exec, Include), hand something over
(ForwardAgent, ForwardX11, SendEnv, SetEnv, GSSAPIDelegateCredentials), open this machine's
network (LocalForward, RemoteForward, DynamicForward, PermitRemoteOpen, GatewayPorts, Tunnel),
send the connection elsewhere (Hostname, ProxyJump, CanonicalDomains, HostKeyAlias) or change
which keys are trusted (StrictHostKeyChecking, UserKnownHostsFile, GlobalKnownHostsFile,
VerifyHostKeyDNS, UpdateHostKeys, IdentityFile, CertificateFile). So:

- A site's `ssh.options` may name only the keywords in ALLOWED, each value held to a full-match
  pattern, written `Key=value` as one word (ssh_words passes each as one `-o` word). The typed
  keys (user, port, identity, known_hosts, host_key, connect_timeout) are the only way to the
  rest, each checked here too. An option hpctrain sets itself to the very same value on every
  ssh it runs (BatchMode=yes, ForwardAgent=no, ...: SAME_AS_OURS) changes nothing: it is accepted
  with a note (notes()) and left out of the command line, so that a site file written for an
  older hpctrain still submits.
- A run record's ssh command line is read back into those typed keys and options, held to the
  same rules, and must be exactly what ssh_words writes for them: it can never hold more than a
  site profile may give (checked_words).
- What runs it (openssh.Ssh) adds NEVER: whatever the reader's own ~/.ssh/config says for `Host *`,
  a host named by a run record gets no agent, no X11 display, no forwarded port, no local command.
"""
from __future__ import annotations

import os
import re
import stat
from typing import NamedTuple

from ...errors import HpctrainError

USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
OPTION = re.compile(r"([A-Za-z][A-Za-z0-9]*)=([!-~]+)")
HOST_KEY = {"strict": "yes", "accept-new": "accept-new", "ignore": "no"}
# A path ssh reads (identity) or writes new host keys into (known_hosts): no space or quote (ssh
# splits an -o value there and reads quotes), no `%` token or `${VAR}` (ssh expands the
# environment into the path, and its error message, printed into a shared job log, with it).
PATH = re.compile(r"[A-Za-z0-9_.,+@~/:-]+")

_YES_NO = r"yes|no"
# The modern OpenSSH defaults only: choosing among them never enables a weak cipher.
_CIPHER = r"chacha20-poly1305@openssh\.com|aes(?:128|256)-gcm@openssh\.com|aes(?:128|192|256)-ctr"
_AUTH = r"publickey|gssapi-with-mic|keyboard-interactive|password"



class Allowed(NamedTuple):
    spelling: str
    pattern: str  # the value, a full match
    values: str   # the same, in words
    safe: str     # what it does, and why that is safe


# keyword (lower case) -> Allowed. Each only times, paces or shapes the connection to the host
# that was named, or picks among the ways to log in that batch mode allows; none runs a program,
# forwards, redirects or changes host-key trust (ssh_config(5)).
ALLOWED: dict[str, Allowed] = {a.spelling.lower(): a for a in (
    Allowed("ServerAliveInterval", r"[1-9][0-9]{0,3}", "1 to 9999 (seconds)",
            "seconds between keep-alives (0, which turns them off, is refused: a dead host "
            "would hang a run)"),
    Allowed("ServerAliveCountMax", r"[1-9][0-9]?", "1 to 99",
            "unanswered keep-alives before the session ends"),
    Allowed("ConnectionAttempts", r"[1-9]", "1 to 9", "tries of the same host"),
    Allowed("TCPKeepAlive", _YES_NO, "yes or no", "the kernel's keep-alives"),
    Allowed("Compression", _YES_NO, "yes or no", "compresses the session"),
    Allowed("AddressFamily", r"any|inet|inet6", "any, inet or inet6",
            "IPv4 or IPv6 of the same host name"),
    Allowed("IPQoS", r"af[1-4][1-3]|cs[0-7]|ef|le|lowdelay|throughput|reliability|none",
            "one class: af11..af43, cs0..cs7, ef, le, lowdelay, throughput, reliability, none",
            "marks the packets' class of service"),
    Allowed("Ciphers", rf"(?:{_CIPHER})(?:,(?:{_CIPHER}))*",
            "a comma list of chacha20-poly1305@openssh.com, aes128-gcm@openssh.com, "
            "aes256-gcm@openssh.com, aes128-ctr, aes192-ctr, aes256-ctr",
            "orders OpenSSH's default ciphers (faster copies), never a weak one"),
    Allowed("PreferredAuthentications", rf"(?:{_AUTH})(?:,(?:{_AUTH}))*",
            "a comma list of publickey, gssapi-with-mic, keyboard-interactive, password",
            "orders the ways to log in (batch mode never prompts)"),
    Allowed("PubkeyAuthentication", _YES_NO, "yes or no", "log in with a key, or not"),
    Allowed("PasswordAuthentication", _YES_NO, "yes or no", "never prompted: batch mode"),
    Allowed("KbdInteractiveAuthentication", _YES_NO, "yes or no", "never prompted: batch mode"),
    Allowed("GSSAPIAuthentication", _YES_NO, "yes or no",
            "log in with a Kerberos ticket, which is never handed over "
            "(GSSAPIDelegateCredentials is refused)"),
    Allowed("IdentitiesOnly", r"yes", "yes only (no would offer the host every key of the agent "
            "as well)", "offers the host only the identity files given, never the agent's other "
            "keys (hpctrain sets it itself with ssh.identity)"),
)}
# Options hpctrain sets itself, or that would change what a session is.
MANAGED = {"batchmode", "controlmaster", "controlpath", "controlpersist", "loglevel",
           "remotecommand", "requesttty", "sessiontype", "stdinnull", "forkafterauthentication"}
# Options with a key of their own in the site's ssh: section.
OWN_KEYS = {"user": "user", "port": "port", "identityfile": "identity",
            "userknownhostsfile": "known_hosts", "stricthostkeychecking": "host_key",
            "connecttimeout": "connect_timeout"}
# Why the best-known refused keywords are refused (any other is refused as not allowed).
_WHY = {
    "runs a program (or reads more configuration) on this machine": (
        "proxycommand", "localcommand", "permitlocalcommand", "knownhostscommand",
        "xauthlocation", "pkcs11provider", "smartcarddevice", "securitykeyprovider", "include",
        "match", "host", "enablesshkeysign", "hostbasedauthentication", "ignoreunknown"),
    "hands over something of this machine (the agent, the X11 display, the environment, "
    "credentials) or opens its network": (
        "forwardagent", "forwardx11", "forwardx11trusted", "forwardx11timeout", "sendenv",
        "setenv", "localforward", "remoteforward", "dynamicforward", "permitremoteopen",
        "gatewayports", "tunnel", "tunneldevice", "gssapidelegatecredentials", "identityagent",
        "addkeystoagent", "exitonforwardfailure", "clearallforwardings", "streamlocalbindmask",
        "streamlocalbindunlink"),
    "sends the connection to another host than the one named": (
        "hostname", "proxyjump", "proxyusefdpass", "canonicalizehostname", "canonicaldomains",
        "canonicalizefallbacklocal", "canonicalizemaxdots", "canonicalizepermittedcnames",
        "bindaddress", "bindinterface", "hostkeyalias"),
    "changes which host keys or identities are trusted": (
        "globalknownhostsfile", "verifyhostkeydns", "updatehostkeys", "checkhostip",
        "revokedhostkeys", "nohostauthenticationforlocalhost", "certificatefile",
        "hostkeyalgorithms", "casignaturealgorithms", "pubkeyacceptedalgorithms",
        "pubkeyacceptedkeytypes", "hostbasedacceptedalgorithms", "kexalgorithms", "macs"),
}
WHY = {key: why for why, keys in _WHY.items() for key in keys}
# The keyword as ssh would read it from one -o word: `-o` glued or not, then a word ending at
# whitespace, `=` or a quote.
_KEYWORD = re.compile(r"\s*(?:-o\s*)?\"?([A-Za-z0-9]+)")
# Added by openssh.Ssh to every command: the host may be named by a run record someone else
# wrote, and the reader's own ~/.ssh/config (`Host *`) must not lend it anything. ssh keeps the
# first value of each, and neither a site nor a record may give these keywords.
NEVER = ["-o", "ForwardAgent=no", "-o", "ForwardX11=no", "-o", "ClearAllForwardings=yes",
         "-o", "PermitLocalCommand=no", "-o", "Tunnel=no"]
# Options hpctrain gives every ssh it runs (NEVER, and ssh_words' own), keyword (lower case) ->
# the option as it writes it: a site that gives one with that value asks for nothing more.
SAME_AS_OURS = {w.split("=")[0].lower(): w for w in [*NEVER[1::2], "BatchMode=yes",
                                                     "LogLevel=ERROR"]}


def allowed_list() -> str:
    return ", ".join(a.spelling for a in ALLOWED.values())


def refusal(option: str) -> tuple[str, str] | None:
    """(why an entry of ssh.options is refused, what to do instead), or None."""
    m = OPTION.fullmatch(option)
    if m is None:
        k = _KEYWORD.match(option)
        if k and k.group(1).lower() not in ALLOWED:
            return refusal(f"{k.group(1)}=x")
        return (f"{k.group(1) if k else 'it'} is not written as after `ssh -o`",
                "write Key=value, one word, without spaces or quotes "
                f"(allowed: {allowed_list()})")
    name, key, value = m.group(1), m.group(1).lower(), m.group(2)
    if key in MANAGED:
        return (f"hpctrain sets {name} itself",
                "remove it (batch mode, one connection per host, its own log level)")
    if key in OWN_KEYS:
        return f"{name} has a key of its own", f"use ssh.{OWN_KEYS[key]} for it"
    if key not in ALLOWED:
        why = WHY.get(key)
        return ((f"{name} {why}, and a site profile may not do that" if why else
                 f"{name} is not one of the options a site may give"),
                f"put it in your own ~/.ssh/config (a Host entry); ssh.options may give only "
                f"{allowed_list()}")
    allowed = ALLOWED[key]
    if not re.fullmatch(allowed.pattern, value):
        return (f"{allowed.spelling}={value[:40]} is not a value it takes",
                f"{allowed.spelling} takes {allowed.values}")
    return None


def same_as_ours(option: str) -> str | None:
    """The option as hpctrain writes it, when an entry of ssh.options is one hpctrain sets
    itself to that very value on every ssh; else None. (ssh reads yes/no and log levels in any
    case.)"""
    m = OPTION.fullmatch(option)
    ours = SAME_AS_OURS.get(m.group(1).lower()) if m else None
    return ours if ours is not None and ours.lower() == option.lower() else None


def notes(opts) -> list[tuple[int, str]]:
    """(index, note) for each entry of a site's ssh.options that is accepted but changes
    nothing: the job's load shows each, once, as a warning at the entry's line."""
    out = []
    for i, option in enumerate(opts.options):
        ours = same_as_ours(option)
        if ours is not None:
            out.append((i, f"ssh.options entry {ours}: hpctrain gives every ssh {ours} itself, "
                           "so the entry is left out; remove it"))
        elif opts.identity and option.lower() == "identitiesonly=yes":
            out.append((i, "ssh.options entry IdentitiesOnly=yes: hpctrain sets it itself with "
                           "ssh.identity; remove it"))
    return out


def site_notes(site, where) -> list[str]:
    """notes() of a site's ssh: section as a job's warnings, each at its entry's line (`where`:
    the job's origins)."""
    return [f"{where.site(('ssh', 'options', i))}: {text}" for i, text in notes(site.ssh)]


def option_problem(option: str) -> str | None:
    """Why an entry of ssh.options is refused and what to do instead (the fix), or None."""
    if same_as_ours(option) is not None:
        return None
    found = refusal(option)
    if found is None:
        return None
    why, fix = found
    return fix if fix.startswith("use ssh.") else f"{why}: {fix}"


def path_problem(key: str, value: str) -> str | None:
    """Why ssh.identity or ssh.known_hosts is refused (the fix), or None."""
    example = "~/.ssh/" + ("id_ed25519" if key == "identity" else "known_hosts")
    if not PATH.fullmatch(value):
        return (f"a path of letters, digits and _ . , + @ ~ / : - (no space, quote, % or $: "
                f"ssh would read or expand them), e.g. {example}")
    if key == "known_hosts" and value != "/dev/null":
        # ssh appends the keys it accepts to this file: never one that is not a known_hosts
        # file (a ~/.bashrc, an authorized_keys), also not through a symbolic link.
        real = os.path.realpath(os.path.expanduser(value))
        if not all("known_hosts" in os.path.basename(p) for p in (value, real)):
            return ("the file ssh adds accepted host keys to: its name must hold 'known_hosts' "
                    f"(e.g. {example}, ./lab_known_hosts), and so must a link's target")
    try:
        st = os.stat(os.path.expanduser(value))
    except (OSError, ValueError):
        return None  # not there (yet): ssh says so itself
    if not stat.S_ISREG(st.st_mode) and value != "/dev/null":
        return f"a regular file (ssh would wait forever on a pipe), e.g. {example}"
    return None


def check_section(opts, doc) -> None:
    """A site's ssh: section (spec.SshOptions), for every scheduler that reads it; raise
    HpctrainError at doc.where(key path)."""
    if opts.user is not None and not USER.fullmatch(opts.user):
        raise HpctrainError(f"ssh.user {opts.user!r} is not a user name",
                            doc.where(("ssh", "user")),
                            "letters, digits, '_', '.' and '-', not starting with '-'")
    for path_key in ("identity", "known_hosts"):
        value = getattr(opts, path_key)
        problem = None if value is None else path_problem(path_key, value)
        if problem:
            raise HpctrainError(f"ssh.{path_key} {value[:80]!r} is not a usable path",
                                doc.where(("ssh", path_key)), problem)
    for i, option in enumerate(opts.options):
        problem = option_problem(option)
        if problem:
            from ...runs.untrusted import excerpt
            raise HpctrainError(f"ssh.options entry {excerpt(option, 60)} is refused",
                                doc.where(("ssh", "options", i)), problem)


def ssh_words(opts) -> list[str]:
    """The ssh command line for a site's ssh: section (spec.SshOptions), without the connection
    sharing (its socket path differs where the command runs)."""
    words = ["ssh"]
    for option in opts.options:  # first: ssh keeps the first value it is given for an option
        if same_as_ours(option) is None:  # those hpctrain writes itself: once, its own
            words += ["-o", option]
    words += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={opts.connect_timeout}",
              "-o", "LogLevel=ERROR", "-o", "ServerAliveInterval=15",
              "-o", "ServerAliveCountMax=4", "-o", f"StrictHostKeyChecking={HOST_KEY[opts.host_key]}"]
    if opts.known_hosts:
        words += ["-o", f"UserKnownHostsFile={opts.known_hosts}"]
    elif opts.host_key == "ignore":
        words += ["-o", "UserKnownHostsFile=/dev/null"]
    if opts.identity:
        # As an option, not -i: ssh expands a leading ~ in both, and no shell need see it bare.
        words += ["-o", f"IdentityFile={opts.identity}", "-o", "IdentitiesOnly=yes"]
    if opts.port:
        words += ["-p", str(opts.port)]
    if opts.user:
        words += ["-l", opts.user]
    return words


# ----------------------------------------------------------------------------- run records

class _Read:
    """A site's ssh: section as read back from the words ssh_words wrote for it."""
    user = port = identity = known_hosts = None
    host_key, connect_timeout = "strict", 10

    def __init__(self):
        self.options: list[str] = []


def checked_words(words, where: str) -> list[str]:
    """An ssh command line read back from a run's record (run.json: `remote.ssh`, `ssh.ssh`):
    read back into a site's ssh: section, which must pass the rules a site profile does, and
    be exactly what ssh_words writes for it. ValueError names the word and says why (`where`:
    the file and key). A record is data, never a command: whoever can write a run directory
    must not run anything as whoever reads it."""
    from ...runs.untrusted import excerpt
    if not (isinstance(words, list) and 1 <= len(words) <= 256 and words[0] == "ssh"
            and all(isinstance(w, str) for w in words)):
        raise ValueError(f"{where} is not an ssh command line hpctrain wrote (['ssh', ...])")
    read, i = _Read(), 1
    # The site's options come first (each one a site may give), then hpctrain's own.
    while i + 1 < len(words) and words[i] == "-o" and refusal(words[i + 1]) is None:
        read.options.append(words[i + 1])
        i += 2
    while i < len(words):
        flag, value = words[i], words[i + 1] if i + 1 < len(words) else None
        if flag not in ("-o", "-p", "-l"):
            raise ValueError(f"{where}: {excerpt(flag, 40)} is not an option hpctrain writes "
                             "(-o, -p, -l)")
        if value is None:
            raise ValueError(f"{where}: {excerpt(flag, 40)} has no value")
        if flag == "-p":
            if not (value.isascii() and value.isdigit() and 1 <= int(value) <= 65535):
                raise ValueError(f"{where}: -p {excerpt(value, 20)} is not a port")
            read.port = int(value)
        elif flag == "-l":
            if not USER.fullmatch(value):
                raise ValueError(f"{where}: -l {excerpt(value, 40)} is not a user name")
            read.user = value
        else:
            _read_option(read, value, where)
        i += 2
    if read.known_hosts == "/dev/null" and read.host_key == "ignore":
        read.known_hosts = None  # what host_key: ignore writes alone
    for path_key in ("identity", "known_hosts"):
        value = getattr(read, path_key)
        problem = None if value is None else path_problem(path_key, value)
        if problem:
            raise ValueError(f"{where}: the {path_key} path {excerpt(value, 60)} is refused: "
                             f"{problem}")
    if "BatchMode=yes" not in words:
        raise ValueError(f"{where}: BatchMode=yes is missing (no prompt may hang)")
    canonical = ssh_words(read)
    if canonical != words:
        at = next(i for i, (a, b) in enumerate(zip([*words, ""], [*canonical, ""])) if a != b)
        shown = " ".join(words[at:at + 2]) if words[at:at + 1] in (["-o"], ["-p"], ["-l"]) \
            else "".join(words[at:at + 1])
        found = excerpt(shown, 60) if at < len(words) else "its end"
        wanted = repr(canonical[at]) if at < len(canonical) else "nothing more"
        raise ValueError(f"{where} is not an ssh command line hpctrain writes: word {at} is "
                         f"{found} where hpctrain writes {wanted} (an option moved, changed, "
                         "missing or given twice)")
    return canonical


def _read_option(read: _Read, option: str, where: str) -> None:
    """One of the -o options ssh_words writes itself, into `read`."""
    from ...runs.untrusted import excerpt
    m = OPTION.fullmatch(option)
    key, value = (m.group(1).lower(), m.group(2)) if m else ("", "")
    if key == "connecttimeout" and value.isascii() and value.isdigit() and len(value) <= 6 \
            and int(value) >= 1:
        read.connect_timeout = int(value)
    elif key == "stricthostkeychecking" and value in HOST_KEY.values():
        read.host_key = next(k for k, v in HOST_KEY.items() if v == value)
    elif key == "userknownhostsfile":
        read.known_hosts = value
    elif key == "identityfile":
        read.identity = value
    elif key == "batchmode" and value != "yes":
        raise ValueError(f"{where}: BatchMode must be yes (no prompt may hang)")
    elif not (m and key in ("batchmode", "loglevel", "serveraliveinterval",
                            "serveralivecountmax", "identitiesonly")):
        found = refusal(option)
        why = found[0] if found else "hpctrain writes it only among the site's options, first"
        raise ValueError(f"{where}: the option {excerpt(option, 60)} is refused: {why}")
    # The values of the others are held by the comparison with what ssh_words writes.

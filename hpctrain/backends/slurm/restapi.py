"""slurmrestd over HTTP: the one place that talks to a site's REST API (`rest:` in its profile).

Where the token goes, and which token, is the user's own choice, never a run directory's:
- rest.url and rest.token_from come from the user's site profile (a run's record must equal
  it: rest.trusted); `target` is the one reading of rest.url, shared by validation and the
  client, so that what a profile may say is exactly what the client can reach.
- token_from names Slurm's own token variable (SLURM_JWT, or SLURM_JWT_<anything> for a second
  cluster) or a file the user owns (`token_source`): never another secret of the environment.
  The value must have a JWT's shape, is read at each request, sent only as X-SLURM-USER-TOKEN
  to rest.url's host itself (no redirect is followed, no proxy of the environment is used: over
  plain http a proxy would read it), and is cut out of anything the server answers and of every
  error, before anything is printed.
- Which OpenAPI plugin to speak (openapi/v0.0.38 on Slurm 22.05, v0.0.40-v0.0.42 on 23.11-24.11)
  is rest.version, or the newest one whose /ping answers (rest.version: auto); the run records
  the answer, so that status and cancel speak the same.
- Every answer is untrusted: one request takes at most rest.timeout seconds in all (a server
  that answers a byte at a time is cut off then), at most MAX_ANSWER bytes are read, and
  msgspec decodes only the few fields read (typed: restjobs.py); any failure, HTTP-level ones
  included, is one SchedulerError saying what, naming the site and the fix (the CLI prints it
  as one `error:` line, exit 2).

Only the standard library's http.client: a GET, a POST and a DELETE need nothing more.
"""
from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import os
import re
import socket
import ssl
import stat
import threading
import time
import urllib.parse
from typing import NamedTuple

import msgspec

from ...errors import HpctrainError
from ..commands import SchedulerError

# Newest first: what rest.version: auto tries. 22.05 serves only v0.0.36-v0.0.38; 24.11 serves
# v0.0.40-v0.0.42. v0.0.39 (23.02) speaks the v0.0.40 shapes this module knows.
VERSIONS = ("v0.0.42", "v0.0.41", "v0.0.40", "v0.0.39", "v0.0.38")
# A whole queue (22.05's jobs list has no filter): 22.05 writes ~2.5 KB a job, 24.11 ~5.5 KB, so
# this holds 6,000 to 13,000 jobs, and decodes in well under a second (restjobs.py reads only
# the fields it needs).
MAX_ANSWER = 32 << 20
MAX_TOKEN = 16384
USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")  # as the site schema's rest.user
# A JWT as Slurm issues it (RFC 7519's compact form: header.payload.signature, base64url):
# anything else in the token's variable or file is not sent.
JWT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
# The variables a Slurm token lives in: `scontrol token` prints SLURM_JWT=..., and Slurm's
# tools read SLURM_JWT; SLURM_JWT_<anything> keeps a second cluster's token beside it.
TOKEN_VARIABLE = re.compile(r"SLURM_JWT(_[A-Za-z0-9_]+)?")
_HOST_NAME = re.compile(r"(?=.{1,253}\Z)[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
                        r"(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*\.?")


class Unusable(ValueError):
    """A rest.url or rest.token_from that cannot be used: what is wrong, and the fix."""

    def __init__(self, what: str, fix: str):
        super().__init__(what)
        self.what, self.fix = what, fix


class Target(NamedTuple):
    scheme: str  # http or https
    host: str  # a DNS name or an IP address (IPv6 without its brackets)
    port: int
    path: str  # a prefix before /slurm/... (a gateway's), "" for none


def shown(url) -> str:
    """A URL as an error may print it: no user name or password, printable, bounded."""
    text = re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@", r"\1<user info>@", str(url))
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= 200 else text[:200] + "..."


_URL_FIX = "write slurmrestd's address as https://host:port (e.g. https://slurm.example.org:6820)"


def target(url: str) -> Target:
    """rest.url as the client reaches it; Unusable (naming the reason) for anything it cannot."""
    if not isinstance(url, str) or not url:
        raise Unusable("rest.url is empty", _URL_FIX)
    if len(url) > 2048 or not url.isascii() or not url.isprintable() or " " in url:
        raise Unusable(f"rest.url {shown(url)!r} holds spaces, control or non-ASCII characters "
                       "or is longer than 2048 characters", _URL_FIX)
    if url.lower().startswith(("unix:", "http+unix:")):
        raise Unusable(f"rest.url {shown(url)!r} names a unix socket, which hpctrain does not "
                       "speak HTTP over", "run slurmrestd on a TCP port as well (slurmrestd "
                       "127.0.0.1:6820) and write http://127.0.0.1:6820, or reach it through an "
                       "ssh tunnel (ssh -L 6820:<slurmrestd host>:6820 <login node>)")
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # urllib's own reading refuses brackets that hold no IPv6 address
        raise Unusable(f"rest.url {shown(url)!r} names no valid host (a DNS name, an IPv4 "
                       "address, or an IPv6 address in brackets: http://[::1]:6820)",
                       _URL_FIX) from None
    if parts.scheme not in ("http", "https") or not url.startswith(parts.scheme + "://"):
        raise Unusable(f"rest.url {shown(url)!r} does not start with https:// or http://",
                       _URL_FIX)
    if "@" in parts.netloc:
        raise Unusable(f"rest.url {shown(url)!r} holds a user name or password before '@': "
                       "the token is the only credential hpctrain sends",
                       "remove it (the user is rest.user, or the one the token names)")
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise Unusable(f"rest.url {shown(url)!r} holds a query or a fragment ('?', '#')",
                       "give slurmrestd's address only: https://host:port, with a path only "
                       "where a gateway puts slurmrestd below one")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:  # urllib's words: "Port out of range", "Port could not be cast..."
        raise Unusable(f"rest.url {shown(url)!r} has no valid port: a number from 1 to 65535 "
                       "after the host", _URL_FIX) from None
    if port == 0:
        raise Unusable(f"rest.url {shown(url)!r} has port 0", _URL_FIX)
    bracketed = parts.netloc.startswith("[")
    try:
        if bracketed:
            ipaddress.IPv6Address(host or "")
        elif not (host and _HOST_NAME.fullmatch(host)) or "[" in parts.netloc or "]" in parts.netloc:
            raise ValueError
    except ValueError:
        raise Unusable(f"rest.url {shown(url)!r} names no valid host (a DNS name, an IPv4 "
                       "address, or an IPv6 address in brackets: http://[::1]:6820)",
                       _URL_FIX) from None
    default = 443 if parts.scheme == "https" else 80
    return Target(parts.scheme, host, port or default, parts.path.rstrip("/"))


def token_source(token_from: str) -> tuple[str, str]:
    """("env", NAME) or ("file", absolute path): where rest.token_from says the token is, or
    Unusable. Only Slurm's token variables, or a file: a site profile (which may be shared)
    or a run record must not be able to send another secret of this environment anywhere."""
    fix = ("export your token as SLURM_JWT (what `scontrol token` prints) and write token_from: "
           "SLURM_JWT (SLURM_JWT_<cluster> for a second one), or keep it in a file only you "
           "can write and give its path: token_from: ~/.slurm-jwt")
    if not isinstance(token_from, str) or not token_from:
        raise Unusable("rest.token_from is empty", fix)
    if TOKEN_VARIABLE.fullmatch(token_from):
        return "env", token_from
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,199}", token_from):
        raise Unusable(f"rest.token_from names ${token_from}, which is not a Slurm token "
                       "variable: hpctrain sends only $SLURM_JWT or $SLURM_JWT_<name> (or a "
                       "file's token) to slurmrestd, never another secret of your environment",
                       fix)
    if token_from.startswith(("/", "~/")) and len(token_from) <= 4096 and \
            token_from.isprintable() and "\0" not in token_from:
        return "file", os.path.expanduser(token_from)
    if token_from.startswith("$"):
        raise Unusable("rest.token_from takes the variable's name, not '$NAME'",
                       "write the name without '$': token_from: SLURM_JWT")
    # Not repeated: what is neither a name nor a path may be a pasted token.
    raise Unusable("rest.token_from is neither the name of a Slurm token variable nor the "
                   "absolute path of a file (/... or ~/...)", fix)


def check_section(site, doc) -> None:
    """A profile's rest: section, beyond the schema (at load, and where a run's record is held
    to it): a URL the client can reach and a token source hpctrain may read, each refused with
    its file:line, the reason and the fix."""
    for key, check in (("url", target), ("token_from", token_source)):
        try:
            check(getattr(site.rest, key))
        except Unusable as exc:
            raise HpctrainError(exc.what, doc.where(("rest", key)), exc.fix) from None


class Error(msgspec.Struct):
    description: str = ""
    error: str = ""
    error_number: int = 0
    source: str = ""


class Answer(msgspec.Struct):
    """What every slurmrestd answer may carry: errors (a list) beside its own fields."""
    errors: list[Error] = []


class Submitted(Answer):
    job_id: int | None = None


def said(errors: list[Error]) -> str:
    """slurmrestd's errors as one bounded line."""
    parts = []
    for e in errors[:5]:
        words = [w for w in (e.source, e.description, e.error) if w]
        parts.append(": ".join(" ".join(w.split())[:300] for w in words))
    return "; ".join(p for p in parts if p) or "(no error text)"


class Rest:
    """One site's slurmrestd. conf: the site's `rest` record (rest.record, or a run's, held
    equal to the user's own profile by rest.trusted), which names the site, the URL, the
    token's source, the user, the plugin version (None: detect) and the request deadline."""

    def __init__(self, conf: dict):
        self.site, self.url = conf["site"], conf["url"].rstrip("/")
        self.token_from, self.user = conf["token_from"], conf.get("user")
        self.version = conf.get("version") if conf.get("version") not in (None, "auto") else None
        self.timeout = float(conf.get("timeout") or 30)
        self._secrets: tuple[str, ...] = ()  # what is cut out of answers and errors

    # ------------------------------------------------------------------------- the token

    def token(self) -> str:
        try:
            kind, where = token_source(self.token_from)
        except Unusable as exc:
            raise self._error(exc.what, exc.fix) from None
        value = os.environ.get(where, "") if kind == "env" else self._token_file(where)
        value = value.strip()
        if value.startswith("SLURM_JWT="):  # `scontrol token` prints it so
            value = value[len("SLURM_JWT="):]
        named = f"${where}" if kind == "env" else where
        if not value:
            if kind == "file":
                raise self._error(f"{where} (rest.token_from) is empty",
                                  f"write your token there: scontrol token lifespan=86400 > {where}")
            raise self._error(f"${where} (rest.token_from) is not set here",
                              f"export {where}=<your JWT> (on a login node: `scontrol "
                              "token lifespan=86400`; or your site's portal); hpctrain never "
                              "writes it")
        if len(value) > MAX_TOKEN or not JWT.fullmatch(value):
            raise self._error(f"{named} does not hold a JWT (header.payload.signature, at most "
                              f"{MAX_TOKEN} characters): it is not sent",
                              f"put only the token in {named} (`scontrol token` prints it)")
        # The token, and its signature alone (an echo cut short still carries that); a short
        # one is left, as it could stand for other text of the answer.
        signature = value.rsplit(".", 1)[1]
        self._secrets = (value, signature) if len(signature) >= 8 else (value,)
        return value

    def _token_file(self, path: str) -> str:
        """A token file the user owns, that nobody else can change (else another user could
        choose the token sent), a regular file read to a bound."""
        from ...runs.untrusted import Unreadable, open_regular
        fix = (f"keep the token in a regular file of your own: scontrol token lifespan=86400 > "
               f"{path}; chmod 600 {path}")
        try:
            with open_regular(path) as f:
                st = os.fstat(f.fileno())
                if st.st_uid != os.getuid():
                    raise self._error(f"{path} (rest.token_from) is not your own file (owner "
                                      f"uid {st.st_uid}): its token is not sent", fix)
                if stat.S_IMODE(st.st_mode) & 0o022:
                    raise self._error(f"{path} (rest.token_from) can be written by others "
                                      f"(mode {stat.S_IMODE(st.st_mode):o}): its token is not "
                                      "sent", fix)
                data = f.read(MAX_TOKEN + 64 + 1)
        except FileNotFoundError:
            raise self._error(f"{path} (rest.token_from) does not exist", fix) from None
        except (Unreadable, OSError) as exc:
            raise self._error(f"cannot read {path} (rest.token_from): "
                              f"{exc.strerror or exc}", fix) from None
        if len(data) > MAX_TOKEN + 64:
            raise self._error(f"{path} (rest.token_from) is larger than a token", fix)
        return data.decode("ascii", "replace")

    def user_name(self, token: str) -> str:
        """rest.user, else the user the token names (its `sun` claim: Slurm's tokens carry
        it). Slurm 22.05 needs the name beside the token."""
        if self.user:
            return self.user
        try:
            payload = token.split(".")[1]
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            name = claims.get("sun") if isinstance(claims, dict) else None
        except (IndexError, ValueError, RecursionError):
            name = None
        if not (isinstance(name, str) and USER.fullmatch(name)):
            raise self._error(f"the token in {self._named()} names no user (no 'sun' claim)",
                              "add user: <your cluster user name> to the site's rest: section")
        return name

    def _named(self) -> str:
        return f"${self.token_from}" if TOKEN_VARIABLE.fullmatch(self.token_from) else self.token_from

    # ------------------------------------------------------------------------- requests

    def api(self) -> str:
        """The plugin version spoken: rest.version, or the newest one this server answers."""
        if self.version is None:
            for version in VERSIONS:
                try:
                    self._call("GET", f"/slurm/{version}/ping", None, Answer, version_probe=True)
                except _NotServed:
                    continue
                self.version = version
                break
            else:
                raise self._error(f"{self.url} serves none of the OpenAPI versions "
                                  f"{', '.join(VERSIONS)} (every /slurm/<version>/ping: HTTP 404)",
                                  "check rest.url: it is slurmrestd's address, without a path "
                                  "(`slurmrestd -s list` on the server names its plugins)")
        return self.version

    def call(self, method: str, path: str, body: dict | None = None, answer: type = Answer):
        """`/slurm/<version>/<path>`, answered as `answer` (an Answer type)."""
        return self._call(method, f"/slurm/{self.api()}/{path.lstrip('/')}", body, answer)

    def _call(self, method: str, path: str, body, answer: type, version_probe: bool = False):
        try:
            where = target(self.url)
        except Unusable as exc:
            raise self._error(exc.what, exc.fix) from None
        token = self.token()
        headers = {"X-SLURM-USER-TOKEN": token, "X-SLURM-USER-NAME": self.user_name(token),
                   "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        status, text = self._send(where, method, path, data, headers)
        if version_probe and status == 404:
            raise _NotServed()
        for secret in self._secrets:  # nothing the server says carries the token further
            text = text.replace(secret.encode(), b"<token>")
        try:
            decoded = msgspec.json.decode(text, type=answer)
        except RecursionError:
            raise self._error(f"{self.url} gave an answer to {method} {path} nested deeper than "
                              "any of slurmrestd's", "check rest.url: it must be slurmrestd "
                              "itself, not a proxy's or a login page") from None
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            if status == 404:
                raise self._error(f"{self.url} does not serve {path} (HTTP 404)",
                                  "set rest.version to one the server loads, or auto") from None
            if status in (401, 403, 511):
                raise self._refused(status, "") from None
            raise self._error(f"{self.url} gave an answer to {method} {path} that is not "
                              f"slurmrestd's (HTTP {status}: {' '.join(str(exc).split())[:200]})",
                              "check rest.url: it must be slurmrestd itself, not a proxy's "
                              "or a login page") from None
        if status in (401, 403, 511) or any("authentication" in f"{e.description} {e.error}".lower()
                                             for e in decoded.errors):
            # 24.11 answers a token slurmctld rejects with HTTP 511 "Protocol authentication error"
            raise self._refused(status, said(decoded.errors) if decoded.errors else "")
        if status >= 400 or (decoded.errors and not getattr(decoded, "job_id", None)):
            # (a submit that queued its job may still say something: "Job is in held state")
            raise Refused(self, method, path, status, decoded.errors)
        return decoded

    def _send(self, where: Target, method: str, path: str, data, headers) -> tuple[int, bytes]:
        """(HTTP status, the answer's bytes, at most MAX_ANSWER), within rest.timeout seconds
        in all; SchedulerError when there is no answer. Straight to rest.url's host: no proxy
        of the environment, no redirect followed (the token goes there and nowhere else)."""
        if where.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                where.host, where.port, timeout=self.timeout, context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(where.host, where.port, timeout=self.timeout)
        expired = threading.Event()

        def expire():
            # The per-read timeout alone lets an answer that drips a byte a second run for
            # ever: at the deadline the connection is shut, which ends any read in progress.
            expired.set()
            sock = conn.sock
            if sock is not None:
                try:
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except OSError:
                    pass

        timer = threading.Timer(self.timeout, expire)
        timer.daemon = True
        started = time.monotonic()
        timer.start()
        try:
            conn.connect()  # bounded by the socket's timeout; the timer may have fired during it
            if expired.is_set():
                raise TimeoutError
            conn.request(method, where.path + path, body=data, headers=headers)
            reply = conn.getresponse()
            if 300 <= reply.status < 400:
                raise self._error(f"{self.url} redirects {path} elsewhere (HTTP {reply.status})",
                                  "set rest.url to the address slurmrestd answers at "
                                  "(the token is not sent on to another address)")
            text = self._bounded(reply, path)
            if expired.is_set():
                raise TimeoutError
            return reply.status, text
        except (http.client.HTTPException, OSError, ValueError) as exc:
            if expired.is_set() or isinstance(exc, TimeoutError) or \
                    time.monotonic() - started >= self.timeout:
                raise self._error(f"slurmrestd at {self.url} did not answer {method} {path} "
                                  f"within {self.timeout:g} s (rest.timeout: the whole request, "
                                  "connecting and reading the answer)",
                                  f"check that slurmrestd answers (`curl -m 30 {self.url}/slurm/"
                                  "<version>/ping` from this machine); if it is only slow (a "
                                  f"very large queue), raise rest.timeout in site "
                                  f"'{self.site}''s profile") from None
            raise self._failed(exc, method, path) from None
        finally:
            timer.cancel()
            conn.close()

    def _failed(self, exc: Exception, method: str, path: str) -> SchedulerError:
        """An answer that is not HTTP, or none at all: what went wrong, in words."""
        said_ = " ".join(str(exc).split())[:200] or type(exc).__name__
        protocol = ("check rest.url: it must be slurmrestd itself (an https:// URL for a server "
                    "that speaks plain http, or the other way round, fails so; so does a proxy "
                    "or another service on that port)")
        if isinstance(exc, http.client.RemoteDisconnected):
            return self._error(f"slurmrestd at {self.url} closed the connection without an "
                               f"answer to {method} {path}", protocol)
        if isinstance(exc, http.client.IncompleteRead):
            return self._error(f"slurmrestd at {self.url} closed the connection before the whole "
                               f"answer to {method} {path} had arrived",
                               "try again; if it stays so, ask the site's admins about "
                               "slurmrestd (it stopped mid-answer)")
        if isinstance(exc, http.client.LineTooLong):
            return self._error(f"{self.url} answered {method} {path} with a status or header "
                               "line longer than HTTP clients read", protocol)
        if isinstance(exc, http.client.HTTPException):
            return self._error(f"{self.url} gave no valid HTTP answer to {method} {path} "
                               f"({type(exc).__name__}: {said_})", protocol)
        if isinstance(exc, ssl.SSLCertVerificationError):
            return self._error(f"slurmrestd at {self.url} has a certificate this machine does "
                               f"not trust ({said_})",
                               "ask the site's admins for their CA certificate and point "
                               "SSL_CERT_FILE at it; the token is not sent to an unverified "
                               "server")
        if isinstance(exc, ssl.SSLError):
            return self._error(f"no TLS connection to {self.url} ({said_})", protocol)
        reason = getattr(exc, "strerror", None) or said_
        return self._error(f"cannot reach slurmrestd at {self.url}: {' '.join(str(reason).split())[:200]}",
                           "check rest.url in the site profile and that slurmrestd runs "
                           f"there (`curl {self.url}/openapi/v3` from this machine)")

    def _bounded(self, reply: http.client.HTTPResponse, path: str) -> bytes:
        most = f"{MAX_ANSWER >> 20} MiB" if MAX_ANSWER >= 1 << 20 else f"{MAX_ANSWER} bytes"
        too_big = self._error(f"{self.url} answered {path} with more than {most}",
                              "check rest.url: slurmrestd's answers are smaller (its whole "
                              "queue grows this large only past ~6,000 jobs on Slurm 22.05, "
                              "~13,000 on 24.11); on such a cluster follow runs with Slurm's "
                              "tools or through login:")
        declared = reply.getheader("Content-Length") or ""
        chunked = "chunked" in (reply.getheader("Transfer-Encoding") or "").lower()
        size = int(declared) if re.fullmatch(r"[0-9]{1,19}", declared) and not chunked else None
        if size is not None and size > MAX_ANSWER:
            raise too_big  # refused before it is read
        text = reply.read(MAX_ANSWER + 1)
        if len(text) > MAX_ANSWER:
            raise too_big
        if size is not None and len(text) < size:
            raise http.client.IncompleteRead(text, size - len(text))
        return text

    def _refused(self, status: int, text: str) -> SchedulerError:
        return self._error(f"slurmrestd at {self.url} refused the token in "
                           f"{self._named()} (HTTP {status}{': ' + text if text else ''})",
                           _TOKEN_FIX.format(var=self._named()))

    def redacted(self, text: str) -> str:
        """Text to print without the token: whole, its signature, and any piece of it an echo
        cut short (each base64url run of 8 or more characters found inside the token)."""
        for secret in self._secrets:
            text = text.replace(secret, "<token>")
        if self._secrets:
            token = self._secrets[0]
            text = re.sub(r"[A-Za-z0-9_-]{8,}",
                          lambda m: "<token>" if m.group() in token else m.group(), text)
        return text

    def _error(self, what: str, fix: str) -> SchedulerError:
        what, fix = self.redacted(what), self.redacted(fix)
        return SchedulerError(["slurmrestd"], None, what, what=f"site '{self.site}': {what}",
                              fix=fix)


_TOKEN_FIX = ("get a fresh token (on a login node: `scontrol token lifespan=86400`) and "
              "put it in {var}; check rest.user (the token's user)")


class _NotServed(Exception):
    """A version probe's 404: this server does not load that plugin."""


class Refused(SchedulerError):
    """slurmrestd answered, and said no (its errors list, or an HTTP error status)."""

    def __init__(self, rest: Rest, method: str, path: str, status: int, errors: list[Error]):
        self.errors, self.http_status = errors, status
        self.said = text = rest.redacted(said(errors))  # what may be printed of them
        fix = ("the words after the status are Slurm's own, as its commands would print them; "
               f"`{rest.url}/slurm/<version>/ping` says whether slurmctld answers")
        if status >= 500 and any(e.error_number == -1 for e in errors):
            # Slurm 22.05 answers a token slurmctld rejects so: HTTP 500, "Unspecified error".
            fix = ("a wrong or expired token reads like this: " +
                   _TOKEN_FIX.format(var=rest._named()) + "; else slurmctld does not answer")
        super().__init__(["slurmrestd"], status, text,
                         what=f"site '{rest.site}': slurmrestd at {rest.url} answered {method} "
                         f"{path} with HTTP {status}: {text}", fix=fix)

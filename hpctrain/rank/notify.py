"""Notifications of a run's events to a webhook: ntfy, Slack, Discord or a plain JSON body.

Standard library only (this folder is copied into every run directory and runs on the nodes).
The webhook URL is read from the environment by the variable's name (`notify.url_from`, like
`secrets`): it is never written to the run directory, a script or a record, and never printed;
no error shows any part of it (errors are described, never quoted; check_url refuses what
urllib would choke on). A send never fails its caller and never
holds it longer than `timeout` seconds: it runs in a daemon thread that is waited for at most
that long. What was sent, or why it could not be, is appended to the run's
status/notify.jsonl (event, when, from where, HTTP status or the error).
"""
from __future__ import annotations

import base64
import http.client
import json
import os
import re
import socket
import stat
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import unquote, urlsplit, urlunsplit

from .records import read_bytes

EVENTS = ("start", "preempted", "requeued", "hang", "node_excluded", "node_replaced",
          "completed", "failed", "stopped")
FORMATS = ("json", "ntfy", "slack", "discord")
RECORD = "status/notify.jsonl"
JOB_TIMEOUT = 3.0  # seconds a send from the job may take: it never holds the job longer

_TITLE = {"start": "started", "preempted": "was preempted", "requeued": "was requeued",
          "hang": "hangs", "node_excluded": "left a node out",
          "node_replaced": "replaced a node with a spare", "completed": "completed",
          "failed": "failed", "stopped": "was stopped"}


def message(event: str, info: dict) -> str:
    """One line: 'run cartpole (20260101-…) job 12 failed: exit 3'."""
    text = f"run {info.get('name', '?')} ({info.get('run_id', '?')}) job {info.get('job', '?')} " \
           f"{_TITLE.get(event, event)}"
    return text + (f": {info['detail']}" if info.get("detail") else "")


def request(fmt: str, event: str, info: dict) -> tuple[bytes, dict[str, str]]:
    """The body and headers a webhook of this format takes."""
    text = message(event, info)
    if fmt == "ntfy":  # the body is the message; the title and tags go in headers
        tags = "warning" if event in ("failed", "hang", "preempted", "node_excluded",
                                          "node_replaced") else "ok"
        return text.encode(), {"Title": f"hpctrain: {event}", "Tags": tags,
                               "Content-Type": "text/plain; charset=utf-8"}
    if fmt == "slack":
        return json.dumps({"text": text}).encode(), {"Content-Type": "application/json"}
    if fmt == "discord":
        return json.dumps({"content": text[:2000]}).encode(), {"Content-Type": "application/json"}
    body = {"event": event, "message": text, **{k: v for k, v in info.items() if k != "detail"}}
    if info.get("detail"):
        body["detail"] = info["detail"]
    return json.dumps(body).encode(), {"Content-Type": "application/json"}


class BadURL(ValueError):
    """A webhook URL hpctrain will not send to; the message says what is wrong, never the URL."""


def check_url(url: str) -> tuple[str, dict[str, str]]:
    """The URL to post to and the headers its credentials become, or BadURL saying what is wrong
    with it without quoting any of it (a webhook URL carries a token in its path or query, a
    password before its host). urllib itself raises on a space, a TAB, `user:password@` or a bad
    port, with the URL in its message: checked here first, so that no part of it is ever shown.
    Spaces and line ends around it (a pasted URL) are dropped."""
    url = url.strip()
    if not url:
        raise BadURL("is empty")
    for i, c in enumerate(url):
        if ord(c) <= 32 or ord(c) == 127:
            raise BadURL(f"holds a space, a TAB or a control character (character {i + 1}): "
                         "remove it, or write it percent-encoded (%20 for a space)")
        if ord(c) > 126:
            raise BadURL(f"holds a non-ASCII character (character {i + 1}): write it "
                         "percent-encoded, and a host name in its xn-- form")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # '[::1' (an unclosed IPv6 host), a port that is no number
        raise BadURL("cannot be read as a URL (a port that is not a number from 1 to 65535, or an "
                     "IPv6 host without its closing ']'?)") from None
    if parts.scheme not in ("http", "https"):
        raise BadURL("starts with neither http:// nor https://")
    host = parts.hostname or ""
    if not _HOST.fullmatch(host):
        raise BadURL("names no host, or a host name with characters a host name cannot hold")
    if port == 0:
        raise BadURL("has port 0: write a port from 1 to 65535, or none")
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
    target = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    headers = {}
    if parts.username is not None or parts.password is not None:
        # user:password@ is HTTP basic authentication (an ntfy topic with access control);
        # urllib would read the password as the port instead.
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    return target, headers


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A webhook answers where it is: a redirect is a failure (HTTP 3xx) and is not followed,
    neither to another host, nor to another scheme, nor with the body."""

    def redirect_request(self, *args, **kwargs):
        return None


class _Kept:
    """An HTTP(S) handler that keeps each connection it opens, so that a send past its time is
    cut (its socket shut down) rather than left reading from a server that trickles bytes or
    sends `100 Continue` without end: the socket's timeout is per read, not per answer."""

    def __init__(self, conns: list, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.conns = conns

    def do_open(self, http_class, req, **kwargs):
        def connection(*args, **kw):
            conn = http_class(*args, **kw)
            self.conns.append(conn)
            return conn
        return super().do_open(connection, req, **kwargs)


class _HTTP(_Kept, urllib.request.HTTPHandler):
    pass


_HANDLERS = [_HTTP]
if hasattr(urllib.request, "HTTPSHandler"):  # an interpreter built without ssl has none
    class _HTTPS(_Kept, urllib.request.HTTPSHandler):
        pass
    _HANDLERS.append(_HTTPS)


def _opener(conns: list):
    # The environment's proxies (http_proxy, https_proxy: a cluster's login node) are kept.
    return urllib.request.build_opener(_NoRedirect, *(h(conns) for h in _HANDLERS))


def _cut(conns: list) -> None:
    for conn in conns:
        sock = getattr(conn, "sock", None)
        try:
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the worker's read; close() would not
        except OSError:
            pass


def _post(url: str, body: bytes, headers: dict, timeout: float, conns: list | None = None) -> dict:
    """POST once; the outcome as a record. Never raises: every error is described by what
    happened (a refused connection, no answer, not HTTP), never by the exception's text, which
    can quote the URL."""
    try:
        target, auth = check_url(url)
        req = urllib.request.Request(target, data=body, headers={**headers, **auth},
                                     method="POST")
        # The answer's body is never read: a webhook's says nothing hpctrain needs, and a
        # hostile one may be endless.
        with _opener([] if conns is None else conns).open(req, timeout=timeout) as resp:  # noqa: S310
            status = int(resp.status)
        return {"ok": 200 <= status < 300, "status": status}
    except urllib.error.HTTPError as exc:
        code = exc.code if isinstance(exc.code, int) else 0
        exc.close()
        return {"ok": False, "status": code,
                "error": f"HTTP {code}" + (" (a redirect: not followed)" if 300 <= code < 400 else "")}
    except BadURL as exc:
        return {"ok": False, "error": f"the URL {exc}"}
    except Exception as exc:  # noqa: BLE001 (a send never fails its caller)
        return {"ok": False, "error": why(exc, timeout)}


def why(exc: BaseException, timeout: float) -> str:
    """What went wrong, in hpctrain's words and the system's error names: never str(exc)."""
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
        exc = exc.reason
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return f"no answer within {timeout:g} s"
    if isinstance(exc, socket.gaierror):
        return "the host name could not be resolved"
    reason = getattr(exc, "reason", None)
    if type(exc).__module__ == "ssl":
        return "TLS: " + (reason if isinstance(reason, str) and _WORD.fullmatch(reason)
                          else type(exc).__name__)
    if isinstance(exc, http.client.InvalidURL):
        return "not sent (the URL is not one http.client takes)"
    if isinstance(exc, http.client.HTTPException):
        return f"the answer is not HTTP ({type(exc).__name__})"
    if isinstance(exc, OSError) and exc.errno and isinstance(exc.errno, int):
        return os.strerror(exc.errno)  # the system's words, with no file name or address
    return f"not sent ({type(exc).__name__})"


_HOST = re.compile(r"[A-Za-z0-9._~%!$&'()*+,;=:-]{1,253}")
_WORD = re.compile(r"[A-Z0-9_]{1,64}")


def redact(text: str, url: str) -> str:
    """A text with the URL and each of its parts (user, password, host, path, query: where
    tokens live) replaced: a last guard over what is recorded or printed."""
    pieces = [url, url.strip()]
    try:
        parts = urlsplit(url.strip())
        pieces += [parts.netloc, parts.path, parts.query, parts.fragment,
                   parts.username or "", parts.password or "", parts.hostname or ""]
        pieces += [unquote(p) for p in pieces]
    except ValueError:
        pieces += re.split(r"[/?#@:\s]+", url)
    for piece in sorted(set(pieces), key=len, reverse=True):
        if len(piece) > 3:
            text = text.replace(piece, "<url>")
    return text


def send(run_dir: str | None, settings: dict, event: str, info: dict, where: str,
         timeout: float = 5.0) -> dict | None:
    """Send one event if `settings` ({url_from, format, events}) asks for it; record the
    outcome in run_dir (when given) and return it (with "recorded": False when the record could
    not be written). Never raises; returns within ~timeout s."""
    if not settings or event not in (settings.get("events") or EVENTS):
        return None
    name = settings.get("url_from") or ""
    url = os.environ.get(name, "") if _NAME.fullmatch(name) else ""
    entry = {"event": event, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "from": where,
             "format": settings.get("format", "json")}
    problem = "is not set to an http(s) URL here" if not url.strip() else None
    if problem is None:
        try:
            check_url(url)
        except BadURL as exc:
            problem = f"(notify.url_from): the URL {exc}"
    if problem is not None:
        entry.update(ok=False, error=f"${name} {problem}")
    else:
        body, headers = request(entry["format"], event, info)
        out: list[dict] = []
        conns: list = []

        def post() -> None:
            try:
                out.append(_post(url, body, headers, timeout, conns))
            except BaseException as exc:  # noqa: BLE001 (never a traceback: it would quote the URL)
                out.append({"ok": False, "error": why(exc, timeout)})

        # A daemon thread, waited for at most ~timeout: an answer that trickles in a byte at a
        # time never trips the socket's own timeout, and must not hold the job or the wait.
        worker = threading.Thread(target=post, daemon=True)
        worker.start()
        worker.join(timeout + min(1.0, timeout / 2))
        late = worker.is_alive()
        if late:  # what the cut makes the worker say (a bad status line, a reset) is not the cause
            _cut(conns)
        result = ({"ok": False, "error": f"no answer within {timeout:g} s"} if late or not out
                  else dict(out[0]))
        if "error" in result:
            result["error"] = _printable(redact(str(result["error"]), url))[:200]
        entry.update(result)
    if run_dir and not _append(run_dir, (json.dumps(entry) + "\n").encode()):
        entry = dict(entry, recorded=False)
    return entry


MAX_RECORDS = 10_000  # lines of status/notify.jsonl read: a run sends a few dozen events
MAX_READ = 4 << 20


def _append(run_dir: str, line: bytes) -> bool:
    """Append one line to the run's status/notify.jsonl, only if it is a regular file of its
    own: a run directory is shared, and a link planted there (status/ or the file) must not
    turn this write into one of any file the job's user can write, nor a named pipe stall the
    job's batch shell (opened without waiting, then refused). False when not written."""
    dir_fd = fd = -1
    try:
        status = os.path.join(run_dir, os.path.dirname(RECORD))
        os.makedirs(status, exist_ok=True)
        dir_fd = os.open(status, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        fd = os.open(os.path.basename(RECORD), os.O_WRONLY | os.O_APPEND | os.O_CREAT
                     | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0),
                     0o644, dir_fd=dir_fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            return False  # a pipe, a device, or a hard link to some other file
        os.write(fd, line)
        return True
    except OSError:  # a link (ELOOP), a pipe without a reader (ENXIO), a full disk
        return False  # a record that cannot be written never fails the run
    finally:
        for f in (fd, dir_fd):
            if f >= 0:
                os.close(f)


def read(run_dir: str) -> list[dict]:
    """The run's notification records, oldest first: a regular file only, at most MAX_READ
    bytes and MAX_RECORDS lines; a line that is not a record is skipped."""
    try:
        data = read_bytes(os.path.join(run_dir, RECORD), MAX_READ)
    except (OSError, ValueError):
        return []
    out = []
    for line in data.splitlines()[:MAX_RECORDS]:
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else " " for c in text)


def here() -> str:
    return socket.gethostname()[:64]


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def from_job(run_dir: str, url_from: str, fmt: str, events: str, event: str,
             detail: str = "") -> int:
    """`rank notify RUN_DIR URL_FROM FORMAT EVENTS EVENT [DETAIL]`: the batch shell's send, from
    the node the job runs on (templates: parts/functions.sh.j2 notify_event). The run is named
    by the environment the script set (HPCTRAIN_JOB_NAME, HPCTRAIN_SITE, SLURM_*). Prints one
    line for the job's log (never the URL) and exits 0 whatever happened."""
    if not _NAME.fullmatch(url_from) or fmt not in FORMATS or event not in EVENTS:
        print(f"notify: not sent: bad arguments ({event[:32]!r})")
        return 0
    job = os.environ.get("SLURM_JOB_ID", "")
    if os.environ.get("SLURM_ARRAY_JOB_ID") and os.environ.get("SLURM_ARRAY_TASK_ID"):
        job = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    info = {"name": os.environ.get("HPCTRAIN_JOB_NAME", "?")[:128],
            "run_id": os.path.basename(os.path.normpath(run_dir))[:128], "job": job or "?",
            "site": os.environ.get("HPCTRAIN_SITE", "")[:128]}
    restarts = os.environ.get("SLURM_RESTART_COUNT", "")
    if restarts.isdigit():
        info["restarts"] = int(restarts)
    if detail:
        info["detail"] = "".join(c if c.isprintable() else " " for c in detail)[:500]
    settings = {"url_from": url_from, "format": fmt,
                "events": [e for e in events.split(",") if e in EVENTS]}
    try:
        entry = send(run_dir, settings, event, info, f"{here()} (the job)", timeout=JOB_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 (send never raises; if it did, no traceback in the log)
        entry = {"ok": False, "error": f"not sent ({type(exc).__name__})"}
    if entry is None:
        return 0
    where = ("not recorded: status/notify.jsonl is not a regular file of the run's"
             if entry.get("recorded") is False else "recorded in status/notify.jsonl")
    if entry.get("ok"):
        print(f"notify: sent {event} (HTTP {entry.get('status')})"
              + ("" if entry.get("recorded") is not False else f" ({where})"))
    else:
        print(f"notify: {event} not sent: {entry.get('error', 'HTTP ' + str(entry.get('status')))}"
              f" ({where})")
    return 0

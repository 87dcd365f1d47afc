"""Notifications of a run's events to a webhook: ntfy, Slack, Discord or a plain JSON body.

Standard library only (this folder is copied into every run directory and runs on the nodes).
The webhook URL is read from the environment by the variable's name (`notify.url_from`, like
`secrets`): it is never written to the run directory, a script or a record, and never printed;
an error that quotes it is shown with the URL replaced. A send never fails its caller and never
holds it longer than `timeout` seconds: it runs in a daemon thread that is waited for at most
that long. What was sent, or why it could not be, is appended to the run's
status/notify.jsonl (event, when, from where, HTTP status or the error).
"""
from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request

EVENTS = ("start", "preempted", "requeued", "hang", "node_excluded", "completed", "failed",
          "stopped")
FORMATS = ("json", "ntfy", "slack", "discord")
RECORD = "status/notify.jsonl"
JOB_TIMEOUT = 3.0  # seconds a send from the job may take: it never holds the job longer

_TITLE = {"start": "started", "preempted": "was preempted", "requeued": "was requeued",
          "hang": "hangs", "node_excluded": "left a node out", "completed": "completed",
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
        tags = "warning" if event in ("failed", "hang", "preempted", "node_excluded") else "ok"
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


def _post(url: str, body: bytes, headers: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (the user's URL)
            return {"ok": 200 <= resp.status < 300, "status": resp.status}
    except urllib.error.HTTPError as exc:
        return {"ok": False, "status": exc.code, "error": f"HTTP {exc.code}"}
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return {"ok": False, "error": redact(str(getattr(exc, "reason", exc)), url)[:200]}


def redact(text: str, url: str) -> str:
    """An error message with the URL, and its path and query (where tokens live), replaced."""
    from urllib.parse import urlsplit
    text = text.replace(url, "<url>")
    try:
        parts = urlsplit(url)
    except ValueError:
        return text
    for piece in (parts.path, parts.query, parts.netloc):
        if len(piece) > 3:
            text = text.replace(piece, "<url>")
    return text


def send(run_dir: str | None, settings: dict, event: str, info: dict, where: str,
         timeout: float = 5.0) -> dict | None:
    """Send one event if `settings` ({url_from, format, events}) asks for it; record the
    outcome in run_dir (when given) and return it. Never raises; returns within ~timeout s."""
    if not settings or event not in (settings.get("events") or EVENTS):
        return None
    name = settings.get("url_from") or ""
    url = os.environ.get(name, "")
    entry = {"event": event, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "from": where,
             "format": settings.get("format", "json")}
    if not url.startswith(("http://", "https://")):
        entry.update(ok=False, error=f"${name} is not set to an http(s) URL here")
    else:
        body, headers = request(entry["format"], event, info)
        out: dict = {}
        worker = threading.Thread(target=lambda: out.update(_post(url, body, headers, timeout)),
                                  daemon=True)
        worker.start()
        worker.join(timeout + 1)
        entry.update(out or {"ok": False, "error": f"no answer within {timeout:.0f} s"})
    if run_dir:
        try:
            path = os.path.join(run_dir, RECORD)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
        except OSError:
            pass  # a record that cannot be written never fails the run
    return entry


def read(run_dir: str) -> list[dict]:
    """The run's notification records, oldest first."""
    try:
        with open(os.path.join(run_dir, RECORD), encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


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
    entry = send(run_dir, settings, event, info, f"{here()} (the job)", timeout=JOB_TIMEOUT)
    if entry is None:
        return 0
    if entry.get("ok"):
        print(f"notify: sent {event} (HTTP {entry.get('status')})")
    else:
        print(f"notify: {event} not sent: {entry.get('error', 'HTTP ' + str(entry.get('status')))}"
              " (recorded in status/notify.jsonl)")
    return 0

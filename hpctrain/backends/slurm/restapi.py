"""slurmrestd over HTTP: the one place that talks to a site's REST API (`rest:` in its profile).

- The JWT is read from the environment variable the site names (rest.token_from) at each
  request and sent as X-SLURM-USER-TOKEN; it is never written, logged or put in an error.
- Which OpenAPI plugin to speak (openapi/v0.0.38 on Slurm 22.05, v0.0.40-v0.0.42 on 23.11-24.11)
  is rest.version, or the newest one whose /ping answers (rest.version: auto); the run records
  the answer, so that status and cancel speak the same.
- Every answer is untrusted: read at most MAX_ANSWER bytes, decoded by msgspec into the few
  fields read (anything else in it is ignored), and a failure is one SchedulerError saying
  what, naming the site and the fix (the CLI prints it as one `error:` line, exit 2).

Only the standard library's urllib: a GET, a POST and a DELETE need nothing more.
"""
from __future__ import annotations

import base64
import json
import os
import re
import urllib.error
import urllib.request
from typing import Any

import msgspec

from ..commands import SchedulerError

# Newest first: what rest.version: auto tries. 22.05 serves only v0.0.36-v0.0.38; 24.11 serves
# v0.0.40-v0.0.42. v0.0.39 (23.02) speaks the v0.0.40 shapes this module knows.
VERSIONS = ("v0.0.42", "v0.0.41", "v0.0.40", "v0.0.39", "v0.0.38")
MAX_ANSWER = 32 << 20  # a large cluster's whole queue (22.05 has no job filter) stays below it
MAX_TOKEN = 16384
USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")  # as the site schema's rest.user


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


class Jobs(Answer):
    jobs: list[dict[str, Any]] = []


def said(errors: list[Error]) -> str:
    """slurmrestd's errors as one bounded line."""
    parts = []
    for e in errors[:5]:
        words = [w for w in (e.source, e.description, e.error) if w]
        parts.append(": ".join(" ".join(w.split())[:300] for w in words))
    return "; ".join(p for p in parts if p) or "(no error text)"


class Rest:
    """One site's slurmrestd. conf: run.json's `rest` record (rest.record), which names the
    site, the URL, the token's variable, the user and the plugin version (None: detect)."""

    def __init__(self, conf: dict):
        self.site, self.url = conf["site"], conf["url"].rstrip("/")
        self.token_from, self.user = conf["token_from"], conf.get("user")
        self.version = conf.get("version") if conf.get("version") not in (None, "auto") else None
        self.timeout = conf.get("timeout") or 30

    # ------------------------------------------------------------------------- the token

    def token(self) -> str:
        value = os.environ.get(self.token_from, "").strip()
        if value.startswith("SLURM_JWT="):  # `scontrol token` prints it so
            value = value[len("SLURM_JWT="):]
        if not value:
            raise self._error(f"${self.token_from} (rest.token_from) is not set here",
                              f"export {self.token_from}=<your JWT> (on a login node: `scontrol "
                              "token lifespan=86400`; or your site's portal); hpctrain never "
                              "writes it")
        if len(value) > MAX_TOKEN or not value.isascii() or not value.isprintable() or " " in value:
            raise self._error(f"${self.token_from} does not hold a JWT (too long, or spaces or "
                              "control characters)", f"put only the token in {self.token_from}")
        return value

    def user_name(self, token: str) -> str:
        """rest.user, else the user the token names (its `sun` claim: Slurm's tokens carry
        it). Slurm 22.05 needs the name beside the token."""
        if self.user:
            return self.user
        try:
            payload = token.split(".")[1]
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            name = claims.get("sun") if isinstance(claims, dict) else None
        except (IndexError, ValueError):
            name = None
        if not (isinstance(name, str) and USER.fullmatch(name)):
            raise self._error(f"the token in ${self.token_from} names no user (no 'sun' claim)",
                              "add user: <your cluster user name> to the site's rest: section")
        return name

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
        token = self.token()
        headers = {"X-SLURM-USER-TOKEN": token, "X-SLURM-USER-NAME": self.user_name(token),
                   "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        status, text = self._send(request, path)
        if version_probe and status == 404:
            raise _NotServed()
        try:
            decoded = msgspec.json.decode(text, type=answer)
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

    def _send(self, request, path: str) -> tuple[int, bytes]:
        """(HTTP status, the answer's bytes, at most MAX_ANSWER); SchedulerError when there is
        no answer. No redirect is followed: a token is sent to rest.url and nowhere else."""
        opener = urllib.request.build_opener(_NoRedirect())
        try:
            with opener.open(request, timeout=self.timeout) as reply:
                return reply.status, self._bounded(reply)
        except urllib.error.HTTPError as exc:
            with exc:
                if 300 <= exc.code < 400:
                    raise self._error(f"{self.url} redirects {path} elsewhere (HTTP {exc.code})",
                                      "set rest.url to the address slurmrestd answers at "
                                      "(the token is not sent on to another address)") from None
                return exc.code, self._bounded(exc)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise self._error(f"cannot reach slurmrestd at {self.url}: "
                              f"{' '.join(str(reason).split())[:200]}",
                              "check rest.url in the site profile and that slurmrestd runs "
                              f"there (`curl {self.url}/openapi/v3` from this machine)") from None

    def _bounded(self, reply) -> bytes:
        text = reply.read(MAX_ANSWER + 1)
        if len(text) > MAX_ANSWER:
            raise self._error(f"{self.url} answered with more than {MAX_ANSWER >> 20} MiB",
                              "check rest.url: slurmrestd's answers are far smaller")
        return text

    def _refused(self, status: int, text: str) -> SchedulerError:
        return self._error(f"slurmrestd at {self.url} refused the token in "
                           f"${self.token_from} (HTTP {status}{': ' + text if text else ''})",
                           _TOKEN_FIX.format(var=self.token_from))

    def _error(self, what: str, fix: str) -> SchedulerError:
        return SchedulerError(["slurmrestd"], None, what, what=f"site '{self.site}': {what}",
                              fix=fix)


_TOKEN_FIX = ("get a fresh token (on a login node: `scontrol token lifespan=86400`) and "
              "export {var}=<it>; check rest.user (the token's user)")


class _NotServed(Exception):
    """A version probe's 404: this server does not load that plugin."""


class Refused(SchedulerError):
    """slurmrestd answered, and said no (its errors list, or an HTTP error status)."""

    def __init__(self, rest: Rest, method: str, path: str, status: int, errors: list[Error]):
        self.errors, self.http_status = errors, status
        text = said(errors)
        fix = ("the words after the status are Slurm's own, as its commands would print them; "
               f"`{rest.url}/slurm/<version>/ping` says whether slurmctld answers")
        if status >= 500 and any(e.error_number == -1 for e in errors):
            # Slurm 22.05 answers a token slurmctld rejects so: HTTP 500, "Unspecified error".
            fix = ("a wrong or expired token reads like this: " +
                   _TOKEN_FIX.format(var=rest.token_from) + "; else slurmctld does not answer")
        super().__init__(["slurmrestd"], status, text,
                         what=f"site '{rest.site}': slurmrestd at {rest.url} answered {method} "
                         f"{path} with HTTP {status}: {text}", fix=fix)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None

"""Hostile webhooks, URLs and run directories for notifications (rank/end/notify.py, the CLI's
`submit --wait --notify` check): no part of the URL is ever printed or written, every answer is a
recorded outcome within the timeout, and status/notify.jsonl is written and read only as a
regular file of the run's own. The servers are real sockets on 127.0.0.1, in threads."""
from __future__ import annotations

import json
import os
import socket
import threading

import pytest

from hpctrain.rank.end import notify

USER, PASSWORD, TOKEN, QUERY = "hpcuser", "pa55w0rdXyz", "t0kenAbc123", "k3yQwe789"
SECRETS = (USER, PASSWORD, TOKEN, QUERY)
INFO = {"name": "cart", "run_id": "20260101-000000-aaaa", "job": "12", "site": "s"}
SETTINGS = {"url_from": "HOOK", "format": "json", "events": list(notify.EVENTS)}
TIMEOUT = 5.0  # seconds a send may take where the server answers at once (it returns then)
SHORT = 0.1  # where it never answers: what each of those costs


class Hostile:
    """A TCP server on 127.0.0.1 that answers each connection as `mode` says; what it received
    is kept (the request bytes, up to the end of the headers and a little body)."""

    def __init__(self, mode: str):
        self.mode, self.got, self.open = mode, [], []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.done = threading.Event()
        self.hung_up = threading.Event()  # the client closed a connection it was answered on
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.open.append(conn)
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        conn.settimeout(5)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            self.got.append(data)
            if self.mode == "silent":  # reads the request, never answers
                self.done.wait(10)
            elif self.mode == "trickle":  # a byte at a time, without end: no socket timeout trips
                # (a status line, then header bytes until the client hangs up: a trickle that ended
                # would close the connection first on a slow machine, and the client see a reset)
                answer = b"HTTP/1.1 200 OK\r\n" + b"X-Slow: y\r\n" * 1000
                for b in answer:
                    if self.done.wait(0.05):
                        return
                    conn.sendall(bytes([b]))
            elif self.mode == "continue":  # '100 Continue' without end: http.client skips each
                while not self.done.is_set():
                    conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n" * 64)
                    self.done.wait(0.01)
            elif self.mode == "huge":  # says 2 GiB and sends until the client hangs up
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2147483648\r\n\r\n")
                block = b"x" * 65536
                for _ in range(2 ** 15):
                    conn.sendall(block)
            elif self.mode == "garbage":
                conn.sendall(b"\x00\xff\x1b]0;pwned\x07 not http at all\r\n\r\n" * 50)
            elif self.mode == "headers":  # more header lines than http.client takes
                conn.sendall(b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 1000 + b"\r\n")
            elif self.mode.startswith("redirect"):
                where = self.mode.split(" ", 1)[1]
                conn.sendall(f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {where}\r\n"
                             "Content-Length: 0\r\n\r\n".encode())
            else:  # ok
                conn.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
        except OSError:  # the client hung up (as it should, on a huge or endless answer)
            self.hung_up.set()
        finally:
            conn.close()

    def url(self, host="127.0.0.1") -> str:
        return f"http://{USER}:{PASSWORD}@{host}:{self.port}/hook/{TOKEN}?key={QUERY}"

    def close(self):
        self.done.set()
        self.sock.close()
        for c in self.open:
            try:
                c.close()
            except OSError:
                pass


@pytest.fixture
def hostile():
    made = []

    def make(mode):
        made.append(Hostile(mode))
        return made[-1]
    yield make
    for h in made:
        h.close()


def _leaks(run_dir, capfd, *also) -> list[str]:
    """The secret parts of the URL found in what this test printed (file descriptors 1 and 2,
    so a thread's traceback too), in any file under run_dir, or in the values given."""
    out, err = capfd.readouterr()
    text = out + err + "".join(json.dumps(a) for a in also)
    for dirpath, _, files in os.walk(run_dir):
        for name in files:
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    text += f.read().decode("utf-8", "replace")
    return [s for s in SECRETS if s in text]


@pytest.mark.parametrize("mode, error", [
    ("silent", f"no answer within {SHORT:g} s"),
    ("trickle", f"no answer within {SHORT:g} s"),
    ("continue", f"no answer within {SHORT:g} s"),
    ("garbage", "the answer is not HTTP (BadStatusLine)"),
    ("headers", "the answer is not HTTP (HTTPException)"),
    ("redirect file:///etc/passwd", "HTTP 307 (a redirect: not followed)"),
])
def test_a_hostile_answer_is_a_recorded_failure(hostile, mode, error, tmp_path, monkeypatch,
                                                capfd):
    server = hostile(mode)
    monkeypatch.setenv("HOOK", server.url())
    timeout = SHORT if "within" in error else TIMEOUT
    entry = notify.send(str(tmp_path), SETTINGS, "failed", INFO, "here", timeout=timeout)
    assert entry["ok"] is False and entry["error"] == error, entry
    assert [(r["event"], r["error"]) for r in notify.read(str(tmp_path))] == [("failed", error)]
    assert _leaks(tmp_path, capfd, entry) == []
    if mode in ("trickle", "continue"):  # the late send is cut, not left reading in a thread
        assert server.hung_up.wait(5)


def test_a_huge_answer_is_not_read(hostile, tmp_path, monkeypatch, capfd):
    """2 GiB announced and streamed: the status is taken, the body never read."""
    server = hostile("huge")
    monkeypatch.setenv("HOOK", server.url())
    entry = notify.send(str(tmp_path), SETTINGS, "start", INFO, "here", timeout=TIMEOUT)
    assert entry["ok"] is True and entry["status"] == 200
    assert _leaks(tmp_path, capfd, entry) == []


def test_a_redirect_to_another_server_is_not_followed(hostile, tmp_path, monkeypatch, capfd):
    target = hostile("ok")
    server = hostile(f"redirect {target.url()}")
    monkeypatch.setenv("HOOK", server.url())
    entry = notify.send(str(tmp_path), SETTINGS, "start", INFO, "here", timeout=TIMEOUT)
    assert entry["status"] == 307 and not entry["ok"]
    assert len(server.got) == 1 and target.got == []
    assert _leaks(tmp_path, capfd, entry) == []


def test_user_and_password_are_basic_authentication(hostile, tmp_path, monkeypatch, capfd):
    """`http://user:password@host/...` (an ntfy topic with access control), with and without
    a port, and an IPv6 host in brackets: sent, the credentials in the Authorization header."""
    server = hostile("ok")
    monkeypatch.setenv("HOOK", server.url())
    entry = notify.send(str(tmp_path), SETTINGS, "start", INFO, "here", timeout=TIMEOUT)
    assert entry["ok"] and entry["status"] == 204
    request = server.got[0].decode()
    assert request.startswith(f"POST /hook/{TOKEN}?key={QUERY} HTTP/1.1\r\n")
    assert "Authorization: Basic aHBjdXNlcjpwYTU1dzByZFh5eg==" in request  # hpcuser:pa55w0rdXyz
    assert notify.check_url(f"http://{USER}:{PASSWORD}@hooks.example/{TOKEN}") == (
        f"http://hooks.example/{TOKEN}", {"Authorization": "Basic aHBjdXNlcjpwYTU1dzByZFh5eg=="})
    assert notify.check_url(f"https://[::1]:8443/{TOKEN}")[0] == f"https://[::1]:8443/{TOKEN}"
    assert notify.check_url(f"  https://ntfy.sh/{TOKEN}\t\n")[0] == f"https://ntfy.sh/{TOKEN}"
    assert _leaks(tmp_path, capfd) == []


@pytest.mark.parametrize("url, problem", [
    (f"https://ntfy.sh/{TOKEN} {QUERY}", "holds a space, a TAB or a control character"),
    (f"https://hooks.slack.com/services/{TOKEN}\t/{QUERY}", "holds a space, a TAB"),
    (f"https://{USER}:{PASSWORD}@ntfy.sh/{TOKEN}\x1b]0;x\x07", "control character"),
    (f"https://ntfy.sh/{TOKEN}é{QUERY}", "holds a non-ASCII character"),
    (f"https://{USER}:{PASSWORD}@ntfy.sh:99999/{TOKEN}", "cannot be read as a URL"),
    (f"https://{USER}:{PASSWORD}@ntfy.sh:x{QUERY}/{TOKEN}", "cannot be read as a URL"),
    (f"https://{USER}:{PASSWORD}@ntfy.sh:0/{TOKEN}", "has port 0"),
    (f"http://[::1/{TOKEN}?{QUERY}", "cannot be read as a URL"),
    (f"file:///home/{USER}/{TOKEN}", "starts with neither http:// nor https://"),
    (f"ftp://{USER}:{PASSWORD}@h/{TOKEN}", "starts with neither"),
    (f"data:text/plain,{TOKEN}", "starts with neither"),
    (f"http:///{TOKEN}", "names no host"),
    (f"http://{USER}:{PASSWORD}@/{TOKEN}", "names no host"),
    (f"https://ho\\st/{TOKEN}", "names no host, or a host name with characters"),
])
def test_a_url_urllib_would_choke_on_is_refused_without_quoting_it(url, problem, tmp_path,
                                                                    monkeypatch, capfd):
    """Today's urllib raises on each (nonnumeric port, control characters, unknown url type)
    with the URL in its message: here each is one recorded failure that names the variable."""
    monkeypatch.setenv("HOOK", url)
    entry = notify.send(str(tmp_path), SETTINGS, "failed", INFO, "here", timeout=TIMEOUT)
    assert not entry["ok"] and entry["error"].startswith("$HOOK (notify.url_from): the URL ")
    assert problem in entry["error"]
    assert notify.from_job(str(tmp_path / "run"), "HOOK", "slack", "start", "start") == 0
    printed = capfd.readouterr().out
    assert printed.startswith("notify: start not sent: $HOOK (notify.url_from): the URL ")
    assert problem in printed
    assert _leaks(tmp_path, capfd, entry, printed) == []


def test_no_exception_text_is_recorded(tmp_path, monkeypatch, capfd):
    """Whatever urllib raises, the record says what happened in its own words: an exception
    whose text quotes the URL (as http.client's and urllib's do) is named by its class."""
    url = f"http://{USER}:{PASSWORD}@127.0.0.1:9/hook/{TOKEN}?key={QUERY}"

    class Quoting(ValueError):
        pass

    def explode(*args, **kwargs):
        raise Quoting(f"nonnumeric port: '{PASSWORD}@127.0.0.1' in {url}")
    monkeypatch.setattr(notify.urllib.request.OpenerDirector, "open", explode)
    monkeypatch.setenv("HOOK", url)
    entry = notify.send(str(tmp_path), SETTINGS, "failed", INFO, "here", timeout=TIMEOUT)
    assert entry["error"] == "not sent (Quoting)"
    assert _leaks(tmp_path, capfd, entry) == []
    assert notify.why(ConnectionRefusedError(111, f"refused {url}"), 1) == os.strerror(111)
    assert notify.why(socket.gaierror(-2, f"unknown {url}"), 1) == \
        "the host name could not be resolved"
    assert notify.why(OSError(f"Tunnel connection failed {url}"), 1) == "not sent (OSError)"


def test_redact_replaces_every_part(tmp_path):
    url = f"https://{USER}:{PASSWORD}@hooks.example/services/{TOKEN}?key={QUERY}"
    for text in (f"at {url}", f"user {USER} password {PASSWORD}", f"path /services/{TOKEN}",
                 f"query key={QUERY}", f"bad {url.replace(':', ' ')}"):
        assert not [s for s in SECRETS if s in notify.redact(text, url)], text


# ------------------------------------------------------------- status/notify.jsonl, a shared file

def _sent(tmp_path, monkeypatch, hostile) -> dict:
    monkeypatch.setenv("HOOK", hostile("ok").url())
    return notify.send(str(tmp_path), SETTINGS, "start", INFO, "here", timeout=TIMEOUT)


def test_the_record_is_not_written_through_a_planted_link(tmp_path, monkeypatch, hostile,
                                                          capfd):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    run = tmp_path / "run"
    (run / "status").mkdir(parents=True)
    (run / "status" / "notify.jsonl").symlink_to(victim)
    entry = notify.send(str(run), SETTINGS, "start", INFO, "here", timeout=TIMEOUT)
    assert victim.read_text() == "precious\n" and entry["recorded"] is False
    # status/ itself a link to another directory: nothing is created there
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run2 = tmp_path / "run2"
    run2.mkdir()
    (run2 / "status").symlink_to(elsewhere)
    assert notify.send(str(run2), SETTINGS, "start", INFO, "here")["recorded"] is False
    assert list(elsewhere.iterdir()) == []
    # a hard link to a file of the user's
    run3 = tmp_path / "run3"
    (run3 / "status").mkdir(parents=True)
    os.link(victim, run3 / "status" / "notify.jsonl")
    assert notify.send(str(run3), SETTINGS, "start", INFO, "here")["recorded"] is False
    assert victim.read_text() == "precious\n"
    # the job's log says so
    notify.from_job(str(run), "HOOK", "json", "start", "start")
    assert "not recorded: status/notify.jsonl is not a regular file" in capfd.readouterr().out


def test_a_fifo_record_never_stalls_the_sender(tmp_path, monkeypatch, capfd):
    """A named pipe at status/notify.jsonl: without a reader, opening it to write would wait
    for ever (the job's batch shell waits for `rank notify`); with one, a write would feed it.
    Both are refused at once; reading it never waits either."""
    monkeypatch.delenv("HOOK", raising=False)  # not sent: only the record is in question
    (tmp_path / "status").mkdir()
    fifo = tmp_path / "status" / "notify.jsonl"
    os.mkfifo(fifo)
    result: list = []
    worker = threading.Thread(target=lambda: result.append(
        notify.from_job(str(tmp_path), "HOOK", "json", "start", "start")), daemon=True)
    worker.start()
    worker.join(5)
    assert result == [0], "rank notify waited on a named pipe"
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert notify.send(str(tmp_path), SETTINGS, "start", INFO, "here")["recorded"] is False
        assert os.read(reader, 100) == b""  # nothing was written into the pipe
    finally:
        os.close(reader)
    assert notify.read(str(tmp_path)) == []
    assert "not recorded" in capfd.readouterr().out


def test_reading_the_record_is_bounded(tmp_path):
    status = tmp_path / "status"
    status.mkdir()
    line = json.dumps({"event": "start", "ok": True}) + "\n"
    (status / "notify.jsonl").write_text("not json\n[1]\n" + line * (notify.MAX_RECORDS + 5))
    records = notify.read(str(tmp_path))
    assert len(records) == notify.MAX_RECORDS - 2 and records[0] == {"event": "start", "ok": True}
    with open(status / "notify.jsonl", "wb") as f:  # a sparse file far over the bound
        f.truncate(3 << 30)
    assert notify.read(str(tmp_path)) == []  # at most the bound is read, then refused


# ------------------------------------------------------------- the CLI: refused at submit

def test_submit_notify_refuses_a_bad_url_without_quoting_it(tmp_path, monkeypatch, capfd):
    from hpctrain.cli import main
    job = tmp_path / "job.yaml"
    job.write_text("name: cart\nscript: train.py\n"
                   "notify: {url_from: HOOK, format: ntfy}\n")
    (tmp_path / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOOK", f"https://{USER}:{PASSWORD}@ntfy.sh:x/{TOKEN} ?key={QUERY}")
    assert main(["submit", str(job), "--site", "local", "--wait", "--notify"]) == 2
    err = capfd.readouterr().err
    assert f"error: {job}: --notify: $HOOK (notify.url_from): the URL holds a space" in err
    # Without --notify the job sends them itself: a warning at submit, the same words
    assert main(["submit", str(job), "--site", "local", "--dry-run"]) == 0
    out, warned = capfd.readouterr()
    assert "warning: notify: $HOOK (notify.url_from): the URL holds a space" in warned
    assert not [s for s in SECRETS if s in err + out + warned]


# ------------------------------------------------------------- submit --wait --notify: the job's events

def _st(state, restarts=0, exit_code=None, excluded=(), ended=None, history=()):
    from hpctrain.backends import JobState
    from hpctrain.follow.status import RunStatus
    return RunStatus(run_id="r1", name="cart", site="s", backend="slurm", job="12", path="/x",
                     submitted=None, nodes=1, ranks_per_node=1,
                     state=JobState(state, restarts=restarts, exit_code=exit_code, nodes="node1"),
                     excluded=list(excluded), ended=ended, history=list(history))


def _follow(run_dir, steps) -> list[tuple[str, bool]]:
    """The events a Notifier sends for `steps` (a status, or a callable that changes the run
    directory as the job would between polls), as (event, ok) from its records."""
    from hpctrain.follow.notify import Notifier
    n = Notifier({"url_from": "HPCT_UNSET_HOOK", "format": "json"}, str(run_dir))
    for step in steps:
        step() if callable(step) else n(step)
    return [(r["event"], r["ok"]) for r in notify.read(str(run_dir))]


def _signalled(run_dir, signal, attempt):
    def write():
        (run_dir / "status").mkdir(exist_ok=True)
        (run_dir / "status" / "stop-0.json").write_text(json.dumps(
            {"rank": 0, "signal": signal, "time": 1.0, "job_restart": attempt}))
    return write


def _started(run_dir):  # the next attempt's launch removes the stop notes (parts/launch.sh.j2)
    return lambda: [p.unlink() for p in (run_dir / "status").glob("stop-*.json")]


def test_a_preemption_is_preempted_then_requeued_as_the_job_sends_it(tmp_path, monkeypatch):
    """tests/slurm/test_notify.py: the job sends start, preempted, requeued, completed."""
    from hpctrain.backends import State
    monkeypatch.delenv("HPCT_UNSET_HOOK", raising=False)
    got = _follow(tmp_path, [_st(State.PENDING), _st(State.RUNNING),
                             _signalled(tmp_path, "TERM", 0), _st(State.RUNNING),
                             _st(State.PENDING, 1), _started(tmp_path), _st(State.RUNNING, 1),
                             _st(State.COMPLETED, 1, 0)])
    assert [e for e, _ in got] == ["start", "preempted", "requeued", "completed"]
    # The polls missed the pending: the stop note seen while it ran still says what came
    again = tmp_path / "again"
    again.mkdir()
    got = _follow(again, [_st(State.RUNNING), _signalled(again, "TERM", 0), _st(State.RUNNING),
                          _started(again), _st(State.RUNNING, 1)])
    assert [e for e, _ in got] == ["start", "preempted", "requeued"]


def test_other_requeues_are_not_preemptions(tmp_path, monkeypatch):
    from hpctrain.backends import State
    monkeypatch.delenv("HPCT_UNSET_HOOK", raising=False)
    # The time-limit warning (preemption.signal, USR2): saved and requeued, not preempted
    warned = tmp_path / "warned"
    warned.mkdir()
    got = _follow(warned, [_st(State.RUNNING), _signalled(warned, "USR2", 0), _st(State.RUNNING),
                           _st(State.PENDING, 1), _st(State.RUNNING, 1)])
    assert [e for e, _ in got] == ["start", "requeued"]
    # A node's fault: srun's teardown sent the other ranks SIGTERM, but the attempt recorded
    # its failure, and a node was left out before the requeue
    fault = tmp_path / "fault"
    fault.mkdir()
    node = {"node": "node2", "reason": "health", "message": "ECC", "time": "t"}
    got = _follow(fault, [_st(State.RUNNING), _signalled(fault, "TERM", 0), _st(State.RUNNING),
                          _st(State.PENDING, 1, excluded=[node], ended="health: node2: ECC"),
                          _st(State.RUNNING, 1, excluded=[node],
                              history=[{"attempt": 1, "reason": "health"}])])
    assert [e for e, _ in got] == ["start", "node_excluded", "requeued"]


@pytest.mark.parametrize("state, exit_code, ended, event", [
    ("COMPLETED", 0, None, "completed"),
    ("STOPPED", 143, "idle_gpus: stopped (idle GPUs) at iteration 3", "stopped"),
    ("FAILED", 143, "idle_gpus: stopped (idle GPUs) at iteration 3", "stopped"),
    ("CANCELLED", 0, None, "stopped"),
    ("TIMEOUT", 0, None, "stopped"),
    ("FAILED", 143, "cancelled: SIGTERM: the job was cancelled", "stopped"),
    ("PREEMPTED", 0, None, "preempted"),
    ("FAILED", 75, "preempted: preempted by the scheduler and not requeued: ...", "preempted"),
    ("FAILED", 75, "preempted: the time-limit warning or a signal sent to the job; ...", "stopped"),
    ("FAILED", 1, "hang: no progress for 20 s", "hang"),
    ("FAILED", 3, "ranks: rank 0 exited 3", "failed"),
    ("NODE_FAIL", None, None, "failed"),
])
def test_each_ending_is_the_jobs_word(state, exit_code, ended, event, tmp_path, monkeypatch):
    from hpctrain.backends import State
    monkeypatch.delenv("HPCT_UNSET_HOOK", raising=False)
    got = _follow(tmp_path, [_st(State.RUNNING), _st(State[state], 0, exit_code, ended=ended),
                             _st(State[state], 0, exit_code, ended=ended)])
    assert [e for e, _ in got] == ["start", event]


def test_one_vocabulary():
    """Every event the batch shell sends (templates/) is one the schema offers and the CLI's
    follower can send, and the other way round."""
    import re
    from pathlib import Path
    from typing import get_args
    from hpctrain.schema.spec import NotifyEvent
    root = Path(__file__).resolve().parents[2] / "templates"
    text = "".join(p.read_text() for p in root.rglob("*.j2"))
    sent = set(re.findall(r"notify_(?:event|end) \"?(\w+)", text))
    sent |= set(re.findall(r"&& echo (\w+) \|\| echo (\w+)", text)[0])
    assert sent == set(notify.EVENTS) == set(get_args(NotifyEvent))
    from hpctrain.follow import notify as follower
    assert all(f"    {e}" in follower.__doc__ or f"| {e}" in follower.__doc__ for e in notify.EVENTS)

"""Notifications (rank/end/notify.py, follow/notify.py): real HTTP posts to a server on 127.0.0.1
in a thread; the URL is never recorded."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from hpctrain.backends import JobState, State
from hpctrain.follow.notify import Notifier
from hpctrain.follow.status import RunStatus
from hpctrain.rank.end import notify


@pytest.fixture
def server():
    got: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append({"path": self.path, "body": body.decode(), "headers": dict(self.headers)})
            self.send_response(200 if self.path != "/broken" else 500)
            self.end_headers()

        def log_message(self, *args):
            pass

    srv = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", got
    srv.shutdown()
    srv.server_close()


INFO = {"name": "cart", "run_id": "20260101-000000-aaaa", "job": "12", "site": "s"}


def test_formats():
    body, headers = notify.request("ntfy", "failed", dict(INFO, detail="exit 3"))
    assert body == b"run cart (20260101-000000-aaaa) job 12 failed: exit 3"
    assert headers["Title"] == "hpctrain: failed"
    assert json.loads(notify.request("slack", "start", INFO)[0]) == {
        "text": "run cart (20260101-000000-aaaa) job 12 started"}
    assert set(json.loads(notify.request("discord", "start", INFO)[0])) == {"content"}
    plain = json.loads(notify.request("json", "requeued", INFO)[0])
    assert plain["event"] == "requeued" and plain["job"] == "12" and plain["run_id"] == INFO["run_id"]


def test_send_records_outcomes_without_the_url(server, tmp_path, monkeypatch):
    url, got = server
    secret = f"{url}/hook/s3cr3t-token"
    monkeypatch.setenv("HOOK", secret)
    settings = {"url_from": "HOOK", "format": "json", "events": ["start", "failed"]}
    assert notify.send(str(tmp_path), settings, "start", INFO, "here")["ok"]
    assert notify.send(str(tmp_path), settings, "completed", INFO, "here") is None  # not asked
    monkeypatch.setenv("HOOK", f"{url}/broken")
    assert notify.send(str(tmp_path), settings, "failed", INFO, "here")["status"] == 500
    monkeypatch.setenv("HOOK", "http://127.0.0.1:9/s3cr3t-token")  # nothing listens there
    refused = notify.send(str(tmp_path), settings, "failed", INFO, "here", timeout=2)
    assert not refused["ok"] and refused["error"]
    monkeypatch.delenv("HOOK")
    unset = notify.send(str(tmp_path), settings, "start", INFO, "here")
    assert unset["error"] == "$HOOK is not set to an http(s) URL here"
    assert [g["path"] for g in got] == ["/hook/s3cr3t-token", "/broken"]
    records = notify.read(str(tmp_path))
    assert [(r["event"], r["ok"]) for r in records] == [
        ("start", True), ("failed", False), ("failed", False), ("start", False)]
    text = "".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file())
    assert "s3cr3t" not in text and "127.0.0.1" not in text


def _st(state, restarts=0, exit_code=None, excluded=()):
    return RunStatus(run_id="r1", name="cart", site="s", backend="slurm", job="12", path="/x",
                     submitted=None, nodes=1, ranks_per_node=1,
                     state=JobState(state, restarts=restarts, exit_code=exit_code, nodes="node1"),
                     excluded=list(excluded))


def test_notifier_sends_each_event_once_in_order(server, tmp_path, monkeypatch):
    url, got = server
    monkeypatch.setenv("HOOK", url + "/n")
    n = Notifier({"url_from": "HOOK", "format": "json"}, str(tmp_path))
    for st in [_st(State.PENDING), _st(State.RUNNING), _st(State.RUNNING),
               _st(State.PENDING, 1), _st(State.RUNNING, 1),
               _st(State.RUNNING, 2),  # a requeue the polls did not see pending
               _st(State.RUNNING, 2, excluded=[{"node": "node3", "reason": "hang"}]),
               _st(State.COMPLETED, 2, 0), _st(State.COMPLETED, 2, 0)]:
        n(st)
    events = [json.loads(g["body"])["event"] for g in got]
    assert events == ["start", "requeued", "requeued", "node_excluded", "completed"]
    assert [r["event"] for r in notify.read(str(tmp_path))] == events


def test_the_job_sends_by_variable_name_and_never_fails(server, tmp_path, monkeypatch, capsys):
    """`rank notify`, as the batch shell calls it: the run named by the job's environment, one
    line for the job's log without the URL, and exit 0 whatever happened."""
    url, got = server
    monkeypatch.setenv("HOOK", f"{url}/hook/s3cr3t-token")
    monkeypatch.setenv("HPCTRAIN_JOB_NAME", "cart")
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    run_dir = tmp_path / "20260101-000000-bbbb"
    assert notify.from_job(str(run_dir), "HOOK", "json", "start,requeued", "requeued",
                           "running again\x1b[2J") == 0
    assert notify.from_job(str(run_dir), "HOOK", "json", "start,requeued", "failed") == 0  # not asked
    assert notify.from_job(str(run_dir), "HOOK;id", "json", "start", "start") == 0  # refused
    monkeypatch.setenv("HOOK", "http://127.0.0.1:9/hook/s3cr3t-token")
    assert notify.from_job(str(run_dir), "HOOK", "slack", "start", "start") == 0
    body = json.loads(got[0]["body"])
    assert len(got) == 1 and body["event"] == "requeued" and body["job"] == "41"
    assert body["run_id"] == run_dir.name and body["restarts"] == 1
    assert body["detail"] == "running again [2J"
    out = capsys.readouterr().out
    assert "notify: sent requeued (HTTP 200)" in out and "notify: start not sent" in out
    assert "s3cr3t" not in out
    records = notify.read(str(run_dir))
    assert [(r["event"], r["ok"]) for r in records] == [("requeued", True), ("start", False)]
    assert all(r["from"].endswith("(the job)") for r in records)
    assert "s3cr3t" not in (run_dir / notify.RECORD).read_text()


def test_errors_never_show_the_url():
    url = "https://hooks.example/services/T000/B000/s3cr3t"
    assert "s3cr3t" not in notify.redact(f"failed for {url}", url)
    assert "s3cr3t" not in notify.redact("bad path /services/T000/B000/s3cr3t", url)

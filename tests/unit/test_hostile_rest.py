"""Hostile rounds against the REST way in (backends/slurm/rest*.py), each class of defect with
real servers on 127.0.0.1: where the token may go and which token (never where a run directory
or another variable says), a deadline on the whole request (an answer that drips), the token cut
out of every error, bounded answers (size, records, array expansions, nesting), HTTP-level
failures and URLs the client cannot read, each one `error:` with the fix, exit 2."""
from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest

from hpctrain.backends import for_run
from hpctrain.backends.commands import SchedulerError
from hpctrain.backends.slurm import records, rest, restapi, restjobs
from hpctrain.cli import main
from hpctrain.errors import HpctrainError
from hpctrain.runs.records import Run, add_to_index

from tests.unit.test_slurm_rest import REST_SITE, TOKEN, Server, a_run, job, write_site

SIGNATURE = TOKEN.rsplit(".", 1)[1]
NO_ERRORS = {"errors": [], "pings": []}


@pytest.fixture
def servers():
    """Two servers: the site's own, and another one (a run directory's choice)."""
    made = [Server(), Server()]
    for s in made:
        s.json("/slurm/v0.0.38/ping", NO_ERRORS)
        s.json("/slurm/v0.0.38/jobs", {"errors": [], "jobs": []})
    yield made
    for s in made:
        s.httpd.shutdown()
        s.httpd.server_close()


def site(url, **rest_keys) -> dict:
    return dict(REST_SITE, rest={"url": url, "token_from": "SLURM_JWT", "version": "v0.0.38",
                                 **rest_keys})


def record_of(doc: dict) -> dict:
    """What submit records for a site profile (rest.record)."""
    import msgspec
    from hpctrain.schema.spec import SiteProfile
    return rest.record(msgspec.convert(doc, SiteProfile))


def client(url, timeout=5, token_from="SLURM_JWT") -> restapi.Rest:
    return restapi.Rest({"site": "far", "url": url, "token_from": token_from, "user": None,
                         "version": "v0.0.38", "timeout": timeout})


def failure(call) -> SchedulerError:
    with pytest.raises(SchedulerError) as info:
        call()
    exc = info.value
    assert exc.what.startswith("site 'far': ") and exc.fix, exc
    assert TOKEN not in str(exc) and SIGNATURE not in str(exc)
    return exc


class RawServer:
    """127.0.0.1:<port> that answers every connection with `reply(conn)`: bytes no http.server
    would write (a broken status line, endless headers, an answer that drips)."""

    def __init__(self, reply):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests: list[bytes] = []

        def serve():
            while True:
                try:
                    conn, _ = self.sock.accept()
                except OSError:
                    return
                threading.Thread(target=self._one, args=(conn, reply), daemon=True).start()

        threading.Thread(target=serve, daemon=True).start()

    def _one(self, conn, reply):
        with conn:
            conn.settimeout(5)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    more = conn.recv(65536)
                    if not more:
                        return
                    data += more
                self.requests.append(data)
                reply(conn)
            except OSError:  # the client went away: what a cut-off answer looks like here
                pass

    def close(self):
        self.sock.close()


@pytest.fixture
def raw():
    made = []

    def make(reply):
        made.append(RawServer(reply))
        return made[-1]
    yield make
    for s in made:
        s.close()


def drip(head: bytes, then: bytes = b""):
    """Send `head` at once, then `then` one byte every 20 ms (at most 10 s)."""
    def reply(conn):
        conn.sendall(head)
        for b in then[:500]:
            conn.sendall(bytes([b]))
            time.sleep(0.02)
    return reply


# ----------------------------------------------------------------------------- where the token goes

def _indexed_run(tmp_path, record) -> Run:
    run = a_run(tmp_path, record)
    (run.path / "job.sbatch").write_text("#!/bin/bash\ntrue\n")
    add_to_index(run)
    return run


@pytest.mark.parametrize("changed", [
    {"url": "OTHER"},  # another host: the other server
    {"token_from": "SLURM_JWT_OTHER"},  # another variable, of a name hpctrain may read
    {"token_from": "GITHUB_TOKEN"},  # another secret altogether
    {"user": "mallory"},
])
@pytest.mark.parametrize("command", [["status"], ["cancel"], ["submit", "--resume"], ["list"]])
def test_a_run_record_never_chooses_where_the_token_goes(tmp_path, home, monkeypatch, capfd,
                                                          servers, changed, command):
    mine, other = servers
    monkeypatch.setenv("SLURM_JWT", TOKEN)
    monkeypatch.setenv("SLURM_JWT_OTHER", TOKEN)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    write_site(tmp_path, monkeypatch, site(mine.url))
    record = dict(record_of(site(mine.url)),
                  **{k: other.url if v == "OTHER" else v for k, v in changed.items()})
    run = _indexed_run(tmp_path, record)
    code = main([*command] if command == ["list"] else [*command, str(run.path)])
    out, err = capfd.readouterr()
    assert other.seen == [] and mine.seen == [], "a request went out"
    assert TOKEN not in out + err and "Traceback" not in err
    reasons = ("a run directory does not choose", "is not a Slurm token variable")
    if command == ["list"]:  # listed, not asked (status RUN says why)
        assert code == 0 and "UNKNOWN" in out, out
    else:
        assert code == 2 and err.startswith("error: ") and "fix:" in err, err
        assert "run.json" in err and any(r in err for r in reasons), err


def test_a_record_equal_to_the_users_profile_is_answered_there(tmp_path, home, monkeypatch, capfd,
                                                                servers):
    mine, _ = servers
    monkeypatch.setenv("SLURM_JWT", TOKEN)
    write_site(tmp_path, monkeypatch, site(mine.url, timeout=7))
    # the run keeps the version its server answered; the deadline is the profile's of today
    record = dict(record_of(site(mine.url)),
                  version="v0.0.38", timeout=3600)
    backend = for_run(a_run(tmp_path, record))
    assert backend.api.url == mine.url and backend.api.timeout == 7
    assert backend.states([Run(tmp_path / "runs" / "j" / "RID")])[0].state.value == "UNKNOWN"
    assert mine.seen[-1][2]["X-SLURM-USER-TOKEN"] == TOKEN


def test_a_run_of_a_site_not_among_the_users_profiles_is_not_asked(tmp_path, home, monkeypatch,
                                                                   servers):
    mine, _ = servers
    monkeypatch.setenv("SLURM_JWT", TOKEN)
    for name in ("far", "../far", "/tmp/far.yaml"):
        with pytest.raises(HpctrainError) as info:
            for_run(a_run(tmp_path / name.replace("/", "_"), dict(record_of(site(mine.url)),
                                                                  site=name)))
        assert "run.json" in str(info.value) and info.value.fix
    assert mine.seen == []


@pytest.mark.parametrize("token_from, said", [
    ("GITHUB_TOKEN", "is not a Slurm token variable"),
    ("AWS_SECRET_ACCESS_KEY", "is not a Slurm token variable"),
    ("SLURM_JWTX", "is not a Slurm token variable"),
    ("$SLURM_JWT", "not '$NAME'"),
    (TOKEN, "neither the name of a Slurm token variable nor"),  # a pasted token: not repeated
    ("token.txt", "neither the name"),  # a relative path: relative to what?
])
def test_a_profile_names_only_slurms_token_variables(tmp_path, home, monkeypatch, capfd,
                                                     token_from, said):
    write_site(tmp_path, monkeypatch, site("https://slurm.example.org:6820", token_from=token_from))
    assert main(["render", str(job(tmp_path)), "--site", "far"]) == 2
    err = capfd.readouterr().err
    assert err.startswith("error: ") and "far.yaml:" in err and said in err and "fix:" in err, err
    assert TOKEN not in err


@pytest.mark.parametrize("name", ["SLURM_JWT", "SLURM_JWT_CLUSTER2"])
def test_slurms_own_token_variables_are_read(server_pair, monkeypatch, name):
    mine = server_pair
    monkeypatch.setenv(name, TOKEN)
    client(mine.url, token_from=name).call("GET", "jobs", None, restjobs.Jobs)
    assert mine.seen[-1][2]["X-SLURM-USER-TOKEN"] == TOKEN


@pytest.fixture
def server_pair(servers):
    return servers[0]


def test_a_token_file_is_read_only_when_it_is_the_users_own(tmp_path, monkeypatch, server_pair):
    mine = server_pair
    path = tmp_path / "jwt"
    path.write_text(f"SLURM_JWT={TOKEN}\n")  # as `scontrol token > file` writes it
    path.chmod(0o600)
    api = client(mine.url, token_from=str(path))
    api.call("GET", "jobs", None, restjobs.Jobs)
    assert mine.seen[-1][2]["X-SLURM-USER-TOKEN"] == TOKEN
    mine.seen.clear()
    path.chmod(0o620)
    assert "can be written by others" in failure(lambda: api.call("GET", "jobs")).what
    path.chmod(0o600)
    real = os.getuid()
    monkeypatch.setattr(restapi.os, "getuid", lambda: real + 1)
    assert "is not your own file" in failure(lambda: api.call("GET", "jobs")).what
    monkeypatch.undo()
    os.truncate(path, 1 << 30)  # sparse: costs nothing, read only to the bound
    assert "larger than a token" in failure(lambda: api.call("GET", "jobs")).what
    path.unlink()
    os.mkfifo(path)  # a pipe with no writer: refused, not waited on
    assert "not a regular file" in failure(lambda: api.call("GET", "jobs")).what
    path.unlink()
    assert "does not exist" in failure(lambda: api.call("GET", "jobs")).what
    (tmp_path / "key").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n")
    (tmp_path / "key").chmod(0o600)
    exc = failure(lambda: client(mine.url, token_from=str(tmp_path / "key")).call("GET", "jobs"))
    assert "does not hold a JWT" in exc.what and "OPENSSH" not in str(exc)
    assert mine.seen == []


def test_a_value_that_is_not_a_jwt_is_never_sent(monkeypatch, server_pair):
    mine = server_pair
    for value in ("ghp_0123456789abcdefghijklmnopqrstuvwxyz", "user:password", "a.b", "x" * 20000):
        monkeypatch.setenv("SLURM_JWT", value)
        exc = failure(lambda: client(mine.url).call("GET", "jobs"))
        assert "does not hold a JWT" in exc.what and value[:20] not in str(exc)
    assert mine.seen == []


def test_the_token_goes_straight_to_the_sites_host_never_through_a_proxy(monkeypatch, servers):
    mine, proxy = servers
    monkeypatch.setenv("SLURM_JWT", TOKEN)
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(var, proxy.url)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    client(mine.url).call("GET", "jobs", None, restjobs.Jobs)
    assert proxy.seen == [] and len(mine.seen) == 1


# ----------------------------------------------------------------------------- a deadline

@pytest.mark.parametrize("head, then", [
    (b"", b"HTTP/1.1 200 OK\r\n"),  # the status line, a byte at a time
    (b"HTTP/1.1 200 OK\r\n", b"X-Slow: " + b"a" * 400),  # a header
    (b"HTTP/1.1 200 OK\r\nContent-Length: 400\r\n\r\n", b"[" * 400),  # the answer
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"1\r\n[\r\n" * 80),
])
def test_an_answer_that_drips_is_cut_off_at_the_deadline(raw, monkeypatch, head, then):
    monkeypatch.setenv("SLURM_JWT", TOKEN)
    slow = raw(drip(head, then))
    exc = failure(lambda: client(slow.url, timeout=0.3).call("GET", "jobs", None, restjobs.Jobs))
    assert "did not answer GET /slurm/v0.0.38/jobs within 0.3 s" in exc.what
    assert "rest.timeout" in exc.fix


def test_the_deadline_is_the_profiles_rest_timeout_through_the_cli(tmp_path, home, monkeypatch,
                                                                    capfd, raw):
    monkeypatch.setenv("SLURM_JWT", TOKEN)
    slow = raw(drip(b"HTTP/1.1 200 OK\r\nContent-Length: 400\r\n\r\n", b"{" * 400))
    write_site(tmp_path, monkeypatch, site(slow.url, timeout=0.25))
    run = _indexed_run(tmp_path, record_of(site(slow.url, timeout=0.25)))
    assert main(["cancel", str(run.path)]) == 2
    err = capfd.readouterr().err
    assert err.startswith("error: site 'far': slurmrestd at") and "within 0.25 s" in err
    assert "fix:" in err and "rest.timeout" in err


# ----------------------------------------------------------------------------- the token is never printed

def _echo(status: int) -> dict:
    return {"errors": [{"description": f"bad token {TOKEN}", "error": f"X-SLURM-USER-TOKEN: {TOKEN}",
                        "error_number": -1 if status == 500 else 1007, "source": SIGNATURE}]}


@pytest.mark.parametrize("status", [401, 403, 500, 511, 400])
def test_errors_that_echo_the_token_never_print_it(server_pair, monkeypatch, status):
    mine = server_pair
    monkeypatch.setenv("SLURM_JWT", TOKEN)
    mine.json("/slurm/v0.0.38/jobs", _echo(status), status)
    exc = failure(lambda: client(mine.url).call("GET", "jobs", None, restjobs.Jobs))
    assert "<token>" in exc.what or status in (401, 403)
    mine.routes["/slurm/v0.0.38/jobs"] = (status, f"denied: {TOKEN}".encode(), {"Content-Type": "text/plain"})
    failure(lambda: client(mine.url).call("GET", "jobs", None, restjobs.Jobs))


def test_a_refused_submit_and_job_records_never_print_the_token(tmp_path, home, monkeypatch, capfd,
                                                                 server_pair):
    mine = server_pair
    monkeypatch.setenv("SLURM_JWT", TOKEN)
    monkeypatch.chdir(tmp_path)
    write_site(tmp_path, monkeypatch, site(mine.url))
    echo = {"description": f"{TOKEN[:-5]}... {TOKEN}", "error": f"sig {SIGNATURE}", "error_number": 2}
    mine.json("/slurm/v0.0.38/job/submit", {"errors": [echo]}, 500)
    assert main(["submit", str(job(tmp_path, preemption={"enabled": False})), "--site", "far"]) == 2
    out, err = capfd.readouterr()
    assert "slurmrestd refused the job" in err and "<token>" in err
    assert SIGNATURE not in out + err and TOKEN[:-5] not in out + err  # an echo cut short too
    # a job record that carries the token: status prints its reason without it
    run = _indexed_run(tmp_path / "r", record_of(site(mine.url)))
    mine.json("/slurm/v0.0.38/jobs", {"jobs": [{"job_id": 12, "job_state": "PENDING",
                                                "state_reason": f"Held {TOKEN}"}]})
    assert main(["status", str(run.path)]) == 0
    out, err = capfd.readouterr()
    assert SIGNATURE not in out + err


def test_a_status_line_that_echoes_the_token_is_not_printed(raw, monkeypatch):
    monkeypatch.setenv("SLURM_JWT", TOKEN)
    echo = raw(lambda conn: conn.sendall(f"{TOKEN} 200 OK\r\n\r\n".encode()))
    failure(lambda: client(echo.url).call("GET", "jobs"))


# ----------------------------------------------------------------------------- bounded answers

def test_many_pending_arrays_expand_to_a_bounded_number_of_tasks():
    """A few bytes of '0-99999' stand for 100,000 tasks: 2,000 such records are read in bounded
    work (it took seconds a megabyte), every index kept within MAX_PENDING."""
    jobs = [{"job_id": i, "array_job_id": i, "array_task_string": "0-99999", "job_state": "PENDING"}
            for i in range(1, 2001)]
    found = restjobs.parse_jobs(jobs)
    assert len(found) == 2000
    assert sum(len(r.pending_tasks) for r in found) == records.MAX_PENDING
    assert found[0].pending_tasks[-1] == 99_999 and found[-1].pending_tasks == ()
    assert records.expand_tasks("0-10", 0) == () and records.expand_tasks("0-10:5", 2) == (0, 5)


def test_a_status_of_an_array_is_linear_in_its_records(tmp_path):
    """Each task's record is found once, not by a scan of all records per task."""
    from hpctrain.backends.slurm.backend import SlurmBackend
    d = tmp_path / "run"
    d.mkdir()
    (d / "run.json").write_text(json.dumps({"run_id": "R", "name": "j", "site": "far",
                                            "backend": "slurm", "job_id": "5", "array_size": 20000}))
    recs = [records.Record(job_id=f"5_{i}", array_job_id="5", task=i, state="RUNNING")
            for i in range(0, 20000, 2)]
    recs.append(records.Record(job_id="5", array_job_id="5", pending_tasks=tuple(range(1, 20000, 2)),
                               state="PENDING"))
    state = SlurmBackend.state_of(Run(d), recs)
    assert len(state.tasks) == 20000 and state.tasks[1].state.value == "PENDING"
    assert state.tasks[3].job == "5_3" and state.tasks[2].state.value == "RUNNING"


def test_an_answer_of_too_many_records_is_refused(server_pair, monkeypatch):
    mine = server_pair
    monkeypatch.setenv("SLURM_JWT", TOKEN)
    mine.routes["/slurm/v0.0.38/jobs"] = (200, b'{"jobs":[' + b",".join(
        [b'{"job_id":1}'] * (restjobs.MAX_JOBS + 1)) + b"]}", {})
    exc = failure(lambda: client(mine.url).call("GET", "jobs", None, restjobs.Jobs))
    assert f"length <= {restjobs.MAX_JOBS}" in exc.what


@pytest.mark.parametrize("path, answer", [("/slurm/v0.0.38/jobs", restjobs.Jobs),
                                          ("/slurm/v0.0.38/ping", restapi.Answer)])
def test_nesting_deeper_than_slurmrestds_is_one_error(server_pair, monkeypatch, path, answer):
    mine = server_pair
    monkeypatch.setenv("SLURM_JWT", TOKEN)
    mine.routes[path] = (200, b'{"jobs":[{"job_id":1,"x":' + b"[" * 50_000 + b"]" * 50_000 + b"}]}", {})
    exc = failure(lambda: client(mine.url).call("GET", path.rsplit("/", 1)[1], None, answer))
    assert "nested deeper than any of slurmrestd's" in exc.what


def test_a_declared_length_over_the_bound_is_refused_before_it_is_read(raw, monkeypatch):
    monkeypatch.setenv("SLURM_JWT", TOKEN)
    big = raw(drip(f"HTTP/1.1 200 OK\r\nContent-Length: {restapi.MAX_ANSWER + 1}\r\n\r\n".encode(),
                   b"{" * 500))
    exc = failure(lambda: client(big.url, timeout=30).call("GET", "jobs", None, restjobs.Jobs))
    assert "with more than 32 MiB" in exc.what


def test_typed_job_records_read_both_releases_as_the_raw_ones():
    from tests.unit.test_slurm_rest import FIXTURES
    for name in ("jobs-v0.0.38-slurm-22.05.8.json", "jobs-v0.0.42-slurm-24.11.5.json"):
        text = (FIXTURES / "slurmrestd" / name).read_bytes()
        typed = restapi.msgspec.json.decode(text, type=restjobs.Jobs).jobs
        assert restjobs.parse_jobs(typed) == restjobs.parse_jobs(json.loads(text)["jobs"])


# ----------------------------------------------------------------------------- HTTP-level failures

@pytest.mark.parametrize("reply, said", [
    (b"garbage\r\n\r\n", "gave no valid HTTP answer"),
    (b"HTTP/1.1 abc OK\r\n\r\n", "gave no valid HTTP answer"),
    (b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", "longer than HTTP clients read"),
    (b"HTTP/1.1 200 " + b"O" * 70_000 + b"\r\n\r\n", "longer than HTTP clients read"),
    (b"HTTP/1.1 200 OK\r\n" + b"X: a\r\n" * 150 + b"\r\n{}", "gave no valid HTTP answer"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}", "before the whole answer"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "before the whole answer"),
    (b"", "closed the connection without an answer"),
])
def test_http_level_failures_are_one_error_with_the_fix(raw, monkeypatch, reply, said):
    monkeypatch.setenv("SLURM_JWT", TOKEN)
    bad = raw(lambda conn: conn.sendall(reply))
    exc = failure(lambda: client(bad.url).call("GET", "jobs", None, restjobs.Jobs))
    assert said in exc.what, exc.what
    assert len(str(exc)) < 1500


def test_an_http_level_failure_through_the_cli_is_exit_2(tmp_path, home, monkeypatch, capfd, raw):
    monkeypatch.setenv("SLURM_JWT", TOKEN)
    bad = raw(lambda conn: conn.sendall(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000 + b"\r\n\r\n"))
    write_site(tmp_path, monkeypatch, site(bad.url))
    run = _indexed_run(tmp_path, record_of(site(bad.url)))
    assert main(["status", str(run.path)]) == 0  # status keeps the last state, and says why
    out = capfd.readouterr().out
    assert "cannot reach slurm" in out and "longer than HTTP clients read" in out
    assert main(["cancel", str(run.path)]) == 2
    err = capfd.readouterr().err
    assert err.startswith("error: site 'far': ") and "fix:" in err and "Traceback" not in err


@pytest.mark.parametrize("url, said", [
    ("http://[::1", "names no valid host"),
    ("http://[zz]:6820", "names no valid host"),
    ("http://:6820", "names no valid host"),
    ("http://host:99999", "no valid port"),
    ("http://host:abc", "no valid port"),
    ("http://host:0", "port 0"),
    ("http://a:1:2", "no valid port"),
    ("https://slurm.example.org:6820/x?y=1", "query or a fragment"),
    ("https://slurm.example.org#top", "query or a fragment"),
    ("unix:/run/slurmrestd.sock", "unix socket"),
    ("ftp://slurm.example.org", "does not start with https:// or http://"),
    ("HTTPS://slurm.example.org", "does not start with https://"),
    ("slurm.example.org:6820", "does not start with https://"),
    ("https://slurm\u00e9.org", "non-ASCII"),
    ("https://bob:hunter2@slurm.example.org:6820", "user name or password"),
    ("https://hunter2@slurm.example.org", "user name or password"),
    ("https://a..b", "names no valid host"),
])
def test_a_url_the_client_cannot_reach_is_refused_at_validate_with_a_reason(
        tmp_path, home, monkeypatch, capfd, url, said):
    write_site(tmp_path, monkeypatch, site(url))
    assert main(["render", str(job(tmp_path)), "--site", "far"]) == 2
    err = capfd.readouterr().err
    assert err.startswith("error: ") and "far.yaml:" in err and said in err, err
    assert "fix: " in err and "hunter2" not in err


@pytest.mark.parametrize("url", ["https://slurm.example.org:6820", "http://127.0.0.1:6820/",
                                 "http://[::1]:6820", "https://gw.example.org/slurmrestd",
                                 "http://node_1.cluster:6820", "https://SLURM.example.org"])
def test_what_validate_accepts_the_client_reads(url):
    where = restapi.target(url)
    assert where.scheme in ("http", "https") and 0 < where.port < 65536 and where.host
    assert not where.path.endswith("/")

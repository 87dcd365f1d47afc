"""Why a run waits and what it collides with, on the real local Slurm cluster: a run behind
higher-priority jobs, one held, one behind a maintenance reservation, and submits that run
into a maintenance (warned) or can never start (refused). Every job and reservation made here
is removed again, whatever happens."""
from __future__ import annotations

import re
import subprocess
import time

import pytest
import yaml

from tests.conftest import submitted
from tests.operate_helpers import WORKER, status_json

pytestmark = pytest.mark.slurm


def _job(tmp_path, name, time_limit="00:05:00", partition="high", nodes=1):
    import sys
    doc = {"name": name, "library": "command", "script": str(WORKER), "args": ["--seconds", "1"],
           "python": sys.executable,
           "resources": {"nodes": nodes, "procs_per_node": 1, "time": time_limit,
                         "partition": partition}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _sbatch(*args) -> str:
    return subprocess.run(["sbatch", "--parsable", "--output=/dev/null", *args], check=True,
                          capture_output=True, text=True).stdout.strip().split(";")[0]


@pytest.fixture
def jobs():
    """Slurm job ids to cancel at the end of the test."""
    ids: list[str] = []
    yield ids
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True)


@pytest.fixture
def reservations():
    """Reservation names to delete at the end of the test."""
    names: list[str] = []
    yield names
    for name in names:
        subprocess.run(["scontrol", "delete", f"reservationname={name}"], capture_output=True)


def _reserve(reservations, name, *spec):
    subprocess.run(["scontrol", "delete", f"reservationname={name}"], capture_output=True)
    reservations.append(name)
    subprocess.run(["scontrol", "create", "reservation", f"reservationname={name}", "users=root",
                    *spec], check=True, capture_output=True, text=True)


def _until(cli, ref, test, timeout=90):
    deadline = time.monotonic() + timeout
    st = {}
    while time.monotonic() < deadline:
        st = status_json(cli, ref)
        if test(st):
            return st
        time.sleep(1)
    raise AssertionError(f"{ref}: {st.get('state')}")


def test_run_behind_higher_priority_jobs_and_held(cli, cluster, tmp_path, jobs):
    # Every node busy for 3 minutes, then one more whole-cluster job first in line.
    jobs.append(_sbatch("-p", "high", "-N4", "--exclusive", "-t", "3", "--wrap", "sleep 170"))
    jobs.append(_sbatch("-p", "high", "-N4", "--exclusive", "-t", "3", "--wrap", "sleep 1"))
    job_id, run_dir = submitted(cli("submit", _job(tmp_path, "pend-queue"), "--site", cluster).stdout)
    jobs.append(job_id)
    st = _until(cli, job_id, lambda s: (s["state"].get("why") or {}).get("category") == "queue"
                and s["state"]["why"].get("estimate"))
    why = st["state"]["why"]
    assert st["state"]["state"] == "PENDING" and why["reason"] == "Priority"
    assert why["ahead"] >= 1 and why["partition"] == "high"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", why["estimate"])
    assert why["text"].startswith(f"behind {why['ahead']} higher-priority job")
    assert f"Slurm estimates it starts {why['estimate']}" in why["text"] and "backfill" in why["action"]
    # A second look is a second query: a job ahead may have started or ended since the first.
    page = cli("status", job_id).stdout
    assert re.search(r"PENDING: behind [1-9]\d* higher-priority job", page) and "action    wait" in page
    assert "behind" in cli("list").stdout
    # Held by the user (`scontrol uhold`; root's plain `hold` is an administrator's): the way
    # out is named.
    subprocess.run(["scontrol", "uhold", job_id], check=True)
    st = _until(cli, job_id, lambda s: (s["state"].get("why") or {}).get("category") == "held")
    assert st["state"]["why"]["text"] == "held by you"
    assert st["state"]["why"]["action"] == f"release it: `scontrol release {job_id}`"
    assert "held by you" in cli("status", run_dir.name).stdout
    subprocess.run(["scontrol", "release", job_id], check=True)
    subprocess.run(["scontrol", "hold", job_id], check=True)
    st = _until(cli, job_id, lambda s: (s["state"].get("why") or {}).get("text") == "held by an administrator")
    assert "administrator" in st["state"]["why"]["action"]


def test_run_behind_a_maintenance_reservation(cli, cluster, tmp_path, jobs, reservations):
    _reserve(reservations, "hpct-maint-now", "starttime=now", "duration=10", "nodes=ALL",
             "flags=maint,ignore_jobs")
    proc = cli("submit", _job(tmp_path, "pend-resv", partition="debug"), "--site", cluster)
    job_id, _ = submitted(proc.stdout)
    jobs.append(job_id)
    assert "maintenance reservation hpct-maint-now" in proc.stderr  # warned at submit
    st = _until(cli, job_id, lambda s: (s["state"].get("why") or {}).get("category") == "reservation")
    why = st["state"]["why"]
    assert [r["name"] for r in why["reservations"]][:1] == ["hpct-maint-now"]
    res = why["reservations"][0]
    assert res["maint"] and res["start"] and res["end"]
    assert f"hpct-maint-now (maintenance, {res['start']} to {res['end']} on" in why["text"]
    assert "starts after hpct-maint-now ends" in why["action"]
    assert "a reservation holds the nodes: hpct-maint-now" in cli("status", job_id).stdout


def test_maintenance_collision_warns_or_refuses_at_submit(cli, cluster, tmp_path, jobs,
                                                          reservations):
    # ignore_jobs: every node, whatever the other sessions run there meanwhile (a job whose limit
    # ends after the start would otherwise refuse the reservation: "Requested nodes are busy").
    _reserve(reservations, "hpct-maint-soon", "starttime=now+600", "duration=30", "nodes=ALL",
             "flags=maint,ignore_jobs")
    # Ends before it: no warning, and the dry run says where and when it would start.
    short = cli("submit", _job(tmp_path, "coll-short", "00:03:00"), "--site", cluster, "--dry-run")
    assert "maintenance" not in short.stderr
    assert re.search(r"^# .*to start at \S+ .*node", short.stdout, re.M), short.stdout
    # Runs into it: warned with the longest time that fits; still submitted.
    proc = cli("submit", _job(tmp_path, "coll-long", "00:20:00"), "--site", cluster)
    job_id, _ = submitted(proc.stdout)
    jobs.append(job_id)
    m = re.search(r"runs into maintenance reservation hpct-maint-soon .* resources.time "
                  r"00:(\d\d):00 or less fits before it", proc.stderr)
    assert m and int(m.group(1)) <= 10, proc.stderr
    # A daily maintenance leaving 10-minute gaps: a 20-minute job can never start.
    _reserve(reservations, "hpct-maint-daily", "starttime=now+300", "duration=23:50:00",
             "nodes=ALL", "flags=maint,daily,ignore_jobs")
    runs_before = sorted(p.name for p in (tmp_path / "runs").glob("*/*"))
    never = cli("submit", _job(tmp_path, "coll-never", "00:20:00"), "--site", cluster, check=False)
    assert never.returncode == 2, never.stdout + never.stderr
    assert "can never start: maintenance reservation hpct-maint-daily" in never.stderr
    assert "00:10:00" in never.stderr and "Traceback" not in never.stderr
    assert sorted(p.name for p in (tmp_path / "runs").glob("*/*")) == runs_before

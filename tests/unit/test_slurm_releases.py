"""Every parser of Slurm's output against the real output of both tested releases, 22.05 and 24.11,
captured from the test clusters by tests/cluster/capture-fixtures.sh with one scenario: a
completed job (ok), a failed one (fail, exit 3), a running 2-node one (run), a held one (held),
one pending on its begin time (later), an array 0-3%1 (arr: task 0 running, 1-3 pending on
JobArrayTaskLimit), and a maintenance reservation in 30 minutes (fixture-maint)."""
from __future__ import annotations

from pathlib import Path

import pytest

from hpctrain.backends.slurm import accounting, detect, pending, records, reservations
from hpctrain.backends.ssh import hostlist
from hpctrain.doctor import scheduler_line

FIXTURES = Path(__file__).parent / "fixtures"
RELEASES = ("22.05", "24.11")


@pytest.fixture(params=RELEASES)
def release(request):
    return request.param


def captured(release: str, name: str) -> str:
    return (FIXTURES / f"slurm-{release}" / "captured" / name).read_text()


def cluster_nodes(release: str) -> set[str]:
    """Every node of that release's test cluster, as its sinfo listed them."""
    parts = detect.sinfo_partitions(captured(release, "sinfo.txt"))
    return {n for p in parts.values() for text in p["nodelist"] for n in hostlist.expand(text)}


def scenario_ids(release: str) -> dict[str, str]:
    """The scenario's job names -> their (last) job ids, from scontrol's own records."""
    ids = {}
    for line in captured(release, "scontrol.txt").splitlines():
        f = records.parse_scontrol_line(line)
        ids[f.get("JobName", "")] = f.get("ArrayJobId") or f["JobId"]
    return ids


@pytest.mark.parametrize("source", ["squeue.json", "scontrol.txt"])
def test_job_records_of_both_releases(release, source):
    parse = records.parse_squeue_json if source.endswith(".json") else records.parse_scontrol
    recs = {r.name: r for r in parse(captured(release, source))}
    ids, nodes = scenario_ids(release), cluster_nodes(release)
    ok, fail, run, held, later, arr = (recs[ids[n]] if n != "arr" else None
                                       for n in ("ok", "fail", "run", "held", "later", "arr"))
    assert (ok.state, ok.exit_code) == ("COMPLETED", 0) and ok.nodes in nodes
    assert (fail.state, fail.exit_code, fail.reason) == ("FAILED", 3, "NonZeroExitCode")
    assert run.state == "RUNNING" and run.node_count == 2
    assert len(set(hostlist.expand(run.nodes)) & nodes) == 2
    assert run.start and run.elapsed(now=run.start + 7) == 7
    assert (held.state, held.reason) == ("PENDING", "JobHeldUser") and held.elapsed() is None
    assert (later.state, later.reason) == ("PENDING", "BeginTime")
    a = ids["arr"]
    assert recs[f"{a}_0"].state == "RUNNING" and recs[f"{a}_0"].array_job_id == a
    rest = recs[f"{a}_[1-3]"]
    assert rest.pending_tasks == (1, 2, 3) and rest.reason == "JobArrayTaskLimit"
    assert {r.partition for r in (ok, run, held)} == {"debug"} and run.user == "root"


def test_squeue_json_has_no_errors_on_either_release(release):
    assert records.squeue_errors(captured(release, "squeue.json")) == []


def test_sacct_records_and_accounting_of_both_releases(release):
    ids = scenario_ids(release)
    recs = {r.name: r for r in records.parse_sacct(captured(release, "sacct.txt"))}
    assert recs[ids["fail"]].state == "FAILED" and recs[ids["fail"]].exit_code == 3
    assert recs[ids["run"]].state == "RUNNING" and recs[ids["run"]].node_count == 2
    assert recs[f"{ids['arr']}_[1-3]"].pending_tasks == (1, 2, 3)
    rows = {r["job_id"]: r for r in accounting.parse(captured(release, "sacct-accounting.txt"))
            if r["array_id"] is None}
    assert rows[ids["ok"]]["state"] == "COMPLETED" and rows[ids["ok"]]["end"] >= rows[ids["ok"]]["start"]
    assert rows[ids["run"]]["cpus"] == 2 and rows[ids["run"]]["end"] is None


def test_pending_queue_of_both_releases(release):
    ids = scenario_ids(release)
    queue = {q["job"].split("_")[0]: q for q in pending.parse_start(captured(release, "squeue-start.txt"))}
    assert queue[ids["held"]]["reason"] == "JobHeldUser" and queue[ids["held"]]["start"] is None
    assert queue[ids["later"]]["reason"] == "BeginTime" and queue[ids["later"]]["start"]
    assert queue[ids["arr"]]["reason"] == "JobArrayTaskLimit"
    assert pending.category("JobHeldUser") == pending.category(queue[ids["held"]]["reason"])


def test_maintenance_reservation_of_both_releases(release):
    (res,) = reservations.parse(captured(release, "reservation.txt"))
    assert res.name == "fixture-maint" and res.maint  # Nodes=ALL: every node of the cluster
    assert res.nodes == cluster_nodes(release)
    assert res.end - res.start == 3600


def test_site_detect_reads_both_releases_and_records_the_version(release):
    config = detect.scontrol_config(captured(release, "config.txt"))
    assert config["SLURM_VERSION"].startswith(release + ".")
    assert config["SelectType"] == "select/cons_tres" and config["ClusterName"] == "localcluster"
    parts = detect.sinfo_partitions(captured(release, "sinfo.txt"))
    assert parts["debug"]["default"] and parts["debug"]["gpus"][0] == 4
    assert min(parts["debug"]["cpus"]) == 2 and min(parts["debug"]["mem_mb"]) == 4000
    text, _ = detect.decide("x", config, parts, "debug", None, ["python3"])
    assert f"slurm_version: {config['SLURM_VERSION']}" in text
    assert detect.slurm_version(captured(release, "version.txt")) == config["SLURM_VERSION"]


def test_version_text_is_parsed_strictly():
    assert detect.slurm_version("slurm 24.11.5\n") == "24.11.5"
    assert detect.slurm_version("slurm-wlm 22.05.8") == "22.05.8"
    assert detect.slurm_version("slurm 25.05.0-rc1") == "25.05.0-rc1"
    for odd in ("", "slurm", "slurm 24.11.5; rm -rf /", "x" * 10_000, "slurm \u0662\u0664.11.5"):
        assert detect.slurm_version(odd) is None


def test_doctor_names_the_release_and_a_stale_profile():
    assert scheduler_line("24.11.5", "24.11.5") == "Slurm 24.11.5"
    assert scheduler_line("24.11.5", None) == "Slurm 24.11.5"
    stale = scheduler_line("24.11.5", "22.05.8")
    assert stale.startswith("Slurm 24.11.5 (the site profile says 22.05.8") and "site detect" in stale
    assert scheduler_line(None, "22.05.8") == ""


def test_test_only_answers_of_both_releases(release):
    line = pending.start_line(captured(release, "test-only.txt"))
    assert line and " to start at " in line and " in partition debug" in line
    refused = captured(release, "test-only-refused.txt")
    assert "invalid partition" in refused.lower()


def test_the_samplers_allocation_record_of_both_releases(release):
    # rank/during/sampler.py reads the job's allocation on its head node: 22.05 names its TRES
    # "TRES", 24.11 "AllocTRES" (and adds ReqTRES).
    from hpctrain.rank.during.sampler import allocation_of
    ids = scenario_ids(release)
    line = next(ln for ln in captured(release, "scontrol.txt").splitlines()
                if f"JobId={ids['run']} " in ln)
    got = allocation_of(line)
    assert got["cpus"] == 2 and got["nodes"] == 2 and got["gpus"] == 0
    assert "cpu=2" in got["tres"] and "node=2" in got["tres"] and got["start_time"].startswith("20")
    assert allocation_of("JobId=9 AllocTRES=cpu=8,gres/gpu=8,node=2 NumCPUs=8")["gpus"] == 8

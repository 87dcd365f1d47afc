"""The health gate of issue 29, the rank side's logic (rank/health.py), on the real H100 bytes of
tests/fixtures/nvidia-smi/ and on faults written into the same fields by the stand-in
nvidia-smi (tests/fakes/nvidia-smi, loaded here as a module: no process starts)."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import threading
import time

import pytest

from hpctrain.job.load import load_job
from hpctrain.job.plan import make_plan
from hpctrain.rank import health, preflight, recovery
from hpctrain.rank.records import JobFailure, write_job_failure
from tests.conftest import ROOT

_loader = importlib.machinery.SourceFileLoader("fake_smi", str(ROOT / "tests/fakes/nvidia-smi"))
_spec = importlib.util.spec_from_loader("fake_smi", _loader)
FAKE = importlib.util.module_from_spec(_spec)
_loader.exec_module(FAKE)

CFG = {**health.DEFAULTS, "expected_gpus": 4}


def rows(gpus=4, fault=""):
    return health.parse_gpus("\n".join(FAKE.health_rows(gpus, FAKE.faults(fault),
                                                        health.GPU_FIELDS)))


def remaps(gpus=4, fault=""):
    return health.parse_remaps("\n".join(FAKE.remap_rows(gpus, FAKE.faults(fault))))


def problems(fault="", **cfg):
    return health.check_rows(rows(4, fault), remaps(4, fault), {**CFG, **cfg})


def test_the_real_h100_output_is_healthy():
    (line,) = FAKE.recorded(f"--query-gpu={FAKE.RECORDED_QUERY} --format=csv,noheader,nounits")
    recorded = dict(zip(FAKE.RECORDED_QUERY.split(","), line.split(", ")))
    (gpu,) = health.parse_gpus(", ".join(recorded[f] for f in health.GPU_FIELDS.split(",")))
    assert gpu["uuid"] == "GPU-c1f2461c-ed11-f4b9-2868-865409eb3d5b"
    assert gpu["driver_version"] == "580.159.04" and gpu["retired_pages.pending"] == "[N/A]"
    remap = health.parse_remaps("\n".join(FAKE.recorded(
        f"--query-remapped-rows={health.REMAP_FIELDS} --format=csv")))
    assert remap["00000000:00:06.0"]["remapped_rows.pending"] == "No"
    assert health.check_rows([gpu], remap, {**CFG, "expected_gpus": 1}) == []
    assert problems() == []


@pytest.mark.parametrize("fault, check, text", [
    ("ecc:2:3", "ecc", "GPU 2 (00000000:00:08.0, GPU-c1f2461c-ed11-f4b9-2868-865409eb3d02): "
     "3 uncorrected volatile ECC error(s)"),
    ("retired:1", "retired_pages", "GPU 1 (00000000:00:07.0, "),
    ("remap:3", "row_remap", "a row remap is pending"),
    ("remapfail:0", "row_remap", "a row remap failed"),
    ("memory:1:20480", "foreign_memory", "GPU 1 (00000000:00:07.0, GPU-c1f2461c-ed11-f4b9-2868-"
     "865409eb3d01): 20480 MiB in use before the job's ranks started"),
    ("missing:2", "gpus", "3 of the 4 GPUs the job expects are visible (bus ids "
     "00000000:00:06.0, 00000000:00:07.0, 00000000:00:09.0)"),
])
def test_each_fault_is_named_with_its_gpu_and_reason_and_can_be_switched_off(fault, check, text):
    (got,) = problems(fault)
    assert got["check"] == check and text in got["message"], got
    option = {"foreign_memory": ("foreign_memory_mib", None)}.get(check, (check, False))
    assert problems(fault, **dict([option])) == []


def test_memory_below_the_threshold_is_not_foreign():
    assert problems("memory:0:1024") == []
    assert problems("memory:0:1025")[0]["gpu"] == 0


def test_only_the_jobs_gpus_are_checked():
    all_four = rows(4, "ecc:3:1")
    ids = [r["uuid"] for r in all_four]
    assert health.ours(all_four, f"{ids[0]},{ids[1]}") == all_four[:2]
    assert health.ours(all_four, "0,1") == all_four[:2]  # no device cgroup: indices of the node's
    assert health.ours(all_four[:2], "2,3") == all_four[:2]  # a cgroup: nvidia-smi sees ours only
    assert health.ours(all_four, None) == all_four


def test_the_gate_reads_nvidia_smi_and_fails_when_it_fails(monkeypatch):
    answers = {}
    monkeypatch.setattr(health.shutil, "which", lambda name: "/bin/" + name)
    monkeypatch.setattr(health, "_query_tool", lambda args, timeout: answers[args[0].split("=")[0]])
    answers["--query-gpu"] = (0, "\n".join(FAKE.health_rows(4, FAKE.faults("ecc:1:2"),
                                                           health.GPU_FIELDS)))
    answers["--query-remapped-rows"] = (0, "\n".join(FAKE.remap_rows(4, {})))
    verdict = health.gate(CFG, "node2")
    assert not verdict["ok"] and verdict["driver"] == "580.159.04" and len(verdict["gpus"]) == 4
    assert health.summary(verdict).startswith("node2 failed the health gate: GPU 1 (")
    answers["--query-gpu"] = (124, "nvidia-smi did not answer within 30 s")
    (hung,) = health.gate(CFG, "node2")["problems"]
    assert hung["message"] == "nvidia-smi failed (status 124): nvidia-smi did not answer within 30 s"
    # A driver whose nvidia-smi does not know a field (the real error text): the gate cannot
    # judge the GPUs, and fails closed (issue 40; tests/unit/test_health_gate.py has the rest).
    answers["--query-gpu"] = (2, "\n".join(FAKE.recorded(
        "--query-gpu=bogus.field --format=csv")))
    (refused,) = health.gate(CFG, "node2")["problems"]
    assert refused["message"].startswith('nvidia-smi answered without a field the gate reads '
                                         '(Field "bogus.field" is not a valid field to query.)')
    monkeypatch.setattr(health.shutil, "which", lambda name: None)
    absent = health.gate({**CFG, "require_nvidia_smi": False}, "node2")
    assert absent["ok"] and absent["notes"] == ["nvidia-smi is not on PATH: the GPUs were not "
                                                "checked (health.require_nvidia_smi: false)"]


def test_the_odd_driver_is_the_minoritys_or_on_a_tie_not_the_heads():
    assert health.odd_drivers({"a": "580.1", "b": "580.1"}) is None
    odd, why = health.odd_drivers({"a": "580.1", "b": "570.2", "c": "580.1"})
    assert odd == ["b"] and why == "the nodes' NVIDIA drivers differ: b 570.2 (the others: 580.1)"
    assert health.odd_drivers({"a": "570.2", "b": "580.1"})[0] == ["b"]
    assert health.odd_drivers({"a": "570.2", "b": ""}) is None  # b's gate did not read one


def test_the_node_barrier_names_the_node_with_another_driver():
    port = _free_port()
    deadline = time.monotonic() + 10
    result = {"ready": threading.Event(), "missing": None, "error": None, "odd": None}
    server = threading.Thread(target=preflight.serve,
                              args=(port, ["n1", "n2", "n3"], deadline, result))
    server.start()
    result["ready"].wait()
    said = {}
    joins = [threading.Thread(target=lambda n=n, d=d: said.__setitem__(
        n, preflight.join("127.0.0.1", port, n, deadline, d)))
        for n, d in (("n1", "580.159.04"), ("n2", "570.86.15"), ("n3", "580.159.04"))]
    for t in joins:
        t.start()
    for t in (*joins, server):
        t.join()
    why = "the nodes' NVIDIA drivers differ: n2 570.86.15 (the others: 580.159.04)"
    assert result["odd"] == (["n2"], why)
    assert said == {n: f"fail: {why}" for n in ("n1", "n2", "n3")}


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_failed_gate_blames_its_node_and_the_requeue_leaves_it_out(tmp_path):
    good = {"node": "node1", "ok": True, "problems": []}
    bad = {"node": "node2", "ok": False, "problems": [{"gpu": 0, "check": "ecc", "message": "x"}]}
    for verdict in (good, bad):
        health.record(str(tmp_path), verdict)
    os.mkfifo(tmp_path / "status" / "health" / "node3.json")  # never opened to wait on
    (tmp_path / "status" / "health" / "node4.json").write_text("{not json")
    assert [v["node"] for v in health.failed_nodes(str(tmp_path))] == ["node2"]
    assert recovery.blamed_nodes(str(tmp_path), "preflight", []) == ["node2"]
    write_job_failure(str(tmp_path), JobFailure(reason="preflight", exit_status=1, message=(
        "preflight failed: node2 failed the health gate: x"), nodes=["node2"]))
    requeue, nodes, why = recovery.decide(str(tmp_path), 2)
    assert requeue and nodes == ["node2"] and "excluding node2" in why


def _plan(tmp_path, site_health=None, **job):
    site = {"name": "gpusite", "scheduler": "slurm", "limits": {"max_gpus_per_node": 8}}
    if site_health is not None:
        site["health"] = site_health
    path = tmp_path / "gpusite.yaml"
    path.write_text(json.dumps(site))
    spec = {"name": "h", "script": "train.py", "resources": {"nodes": 2, "gpus_per_node": 4}}
    spec.update(job)
    return make_plan(load_job(spec, site=str(path)), str(tmp_path / "run"))


def test_the_gate_is_on_for_multinode_gpu_jobs_and_site_and_job_tune_it(tmp_path):
    gate = _plan(tmp_path).bootstrap["health"]
    assert gate == {**health.DEFAULTS, "expected_gpus": 4, "cuda": True}
    tuned = _plan(tmp_path, {"foreign_memory_mib": 4096, "ecc": False},
                  health={"ecc": True}).bootstrap["health"]
    assert tuned["foreign_memory_mib"] == 4096 and tuned["ecc"] is True
    assert _plan(tmp_path, {"enabled": False}).bootstrap["health"] is None
    assert _plan(tmp_path, resources={"nodes": 2}).bootstrap["health"] is None  # no GPUs asked
    assert _plan(tmp_path, resources={"nodes": 2}, health={"enabled": True}
                 ).bootstrap["health"]["expected_gpus"] == 0
    single = load_job({"name": "h", "script": "t.py", "health": {"enabled": True},
                       "resources": {"gpus_per_node": 1}}, site=str(tmp_path / "gpusite.yaml"))
    assert not any("health gate" in w for w in single.warnings)  # its agent runs the gate
    tasks = load_job({"name": "h", "library": "skrl_jax", "script": "t.py", "health": {
        "enabled": True}, "resources": {"gpus_per_node": 1}}, site="local")
    assert tasks.warnings == ("<python>: with the skrl_jax library the health gate runs in the node "
                              "check of multi-node jobs (launcher.preflight): this job's nodes are "
                              "not checked",)


def test_a_single_node_gets_the_gate_in_its_agent_and_a_failure_is_written_as_the_checks(
        tmp_path, monkeypatch):
    single = _plan(tmp_path, resources={"nodes": 1, "gpus_per_node": 4})
    assert single.bootstrap["health"]["expected_gpus"] == 4 and single.health_in_agent
    assert not _plan(tmp_path).health_in_agent  # two nodes: the node check runs it
    run = tmp_path / "run"
    run.mkdir()
    (run / "bootstrap.json").write_text(json.dumps({"health": single.bootstrap["health"]}))
    monkeypatch.setenv("HPCTRAIN_RUN_DIR", str(run))
    monkeypatch.setenv("SLURMD_NODENAME", "node3")
    monkeypatch.setattr(health.shutil, "which", lambda name: "/bin/" + name)
    rows = {"--query-gpu": (0, "\n".join(FAKE.health_rows(3, {}, health.GPU_FIELDS))),
            "--query-remapped-rows": (0, "\n".join(FAKE.remap_rows(3, {})))}
    monkeypatch.setattr(health, "_query_tool", lambda args, timeout: rows[args[0].split("=")[0]])
    assert preflight.health_only() == 1
    said = (run / "status" / "preflight-failed-node3.txt").read_text()
    assert said.startswith("node3 failed the health gate: 3 of the 4 GPUs the job expects")
    assert recovery.blamed_nodes(str(run), "preflight", []) == ["node3"]


def test_network_floor_pairs_come_in_three_rounds_of_disjoint_neighbours():
    from hpctrain.rank.netfloor import rounds
    assert rounds(1) == [] and rounds(2) == []
    assert rounds(3) == [[(0, 1)], [(1, 2)], [(2, 0)]]
    assert rounds(4) == [[(0, 1), (2, 3)], [(1, 2)], [(3, 0)]]
    for n in range(3, 40):
        got = rounds(n)
        assert len(got) == 3
        pairs = [p for r in got for p in r]
        assert sorted(pairs) == sorted((i, (i + 1) % n) for i in range(n)), n  # each neighbour once
        for r in got:  # a node is in one pair of a round at most
            members = [x for p in r for x in p]
            assert len(members) == len(set(members)), (n, r)


def test_network_floor_names_the_node_in_both_slowest_pairs_or_the_pair():
    from hpctrain.rank.netfloor import verdict
    nodes = ["node1", "node2", "node3", "node4"]
    fast = {(0, 1): 90.0, (1, 2): 95.0, (2, 3): 92.0, (3, 0): 91.0}
    assert verdict(nodes, 80.0, fast, 50) == (True, [], "all-reduce bus bandwidth 80 Gbit/s "
                                              "across 4 nodes (floor 50)")
    # node3's link is slow: it is in the two slowest pairs, and it alone is blamed.
    slow3 = {**fast, (1, 2): 4.0, (2, 3): 3.5}
    ok, blamed, text = verdict(nodes, 6.0, slow3, 50)
    assert not ok and blamed == ["node3"], (blamed, text)
    assert text.startswith("network floor: all-reduce bus bandwidth 6 Gbit/s across 4 nodes, "
                           "below health.allreduce_min_gbps=50; slowest pair node3-node4 at 3.5")
    assert "node2-node3 at 4 Gbit/s, also has node3" in text
    # One slow pair, its neighbours fine: both of its nodes.
    assert verdict(nodes, 6.0, {**fast, (0, 1): 2.0}, 50)[1] == ["node1", "node2"]
    # Every pair below the floor: the network, not a node, and nobody is left out for it.
    ok, blamed, text = verdict(nodes, 6.0, {p: 5.0 for p in fast}, 50)
    assert not ok and blamed == [] and "every pair is below the floor" in text
    ok, blamed, text = verdict(nodes, 40.0, fast, 50)  # each pair fast, the ring not
    assert not ok and blamed == [] and "the ring as a whole does not" in text
    # Two nodes are one pair: both are named.
    assert verdict(nodes[:2], 1.0, {}, 50)[:2] == (False, ["node1", "node2"])
    assert verdict(nodes[:2], 1.0, {}, 0)[0]  # 0: measured, never failing


def test_network_floor_is_in_the_plan_of_multinode_jobs_that_set_it(tmp_path):
    assert _plan(tmp_path).bootstrap["netfloor"] is None
    site = _plan(tmp_path, {"allreduce_min_gbps": 100}).bootstrap["netfloor"]
    assert site == {"min_gbps": 100, "timeout": 60}
    job = _plan(tmp_path, {"allreduce_min_gbps": 100}, health={"allreduce_min_gbps": 0},
                launcher={"preflight_timeout": 30}).bootstrap["netfloor"]
    assert job == {"min_gbps": 0, "timeout": 30}
    assert _plan(tmp_path, {"allreduce_min_gbps": 100},
                 resources={"nodes": 1, "gpus_per_node": 4}).bootstrap["netfloor"] is None
    off = load_job({"name": "h", "script": "t.py", "resources": {"nodes": 2},
                    "launcher": {"preflight": False}, "health": {"allreduce_min_gbps": 10}},
                   site=str(tmp_path / "gpusite.yaml"))
    assert any("network floor" in w for w in off.warnings), off.warnings
    assert make_plan(off, str(tmp_path / "r")).bootstrap["netfloor"] is None


def test_network_floor_settings_from_a_run_directory_are_bounded(tmp_path, monkeypatch):
    """bootstrap.json is a run directory's: a timeout or floor out of range is not taken."""
    from hpctrain.rank import netfloor
    seen = {}

    def fake_run(cmd, **kw):
        seen["cmd"], seen["timeout"] = cmd, kw["timeout"]
        assert kw["env"]["NCCL_ALGO"] == "Ring"
        return type("P", (), {"returncode": 0})()
    monkeypatch.setattr(netfloor.subprocess, "run", fake_run)
    assert netfloor.run({"min_gbps": 1e300, "timeout": 1e9}) == 0
    assert seen["cmd"][-3:] == ["netfloor", "60", "0"] and seen["timeout"] == 90
    run = tmp_path / "run"
    (run / "status").mkdir(parents=True)
    (run / "bootstrap.json").write_text(json.dumps({"netfloor": {"min_gbps": "fast"}}))
    monkeypatch.setenv("HPCTRAIN_RUN_DIR", str(run))
    seen.clear()
    marks = {}
    assert preflight._network_floor(marks) == 0 and not seen and not marks  # not a number: not measured


def test_dcgm_diagnostic_fails_the_node_with_the_gpu_and_dcgms_words(monkeypatch):
    """health.dcgm_diag: `dcgmi diag -r 1 -j` where dcgmi exists (the stand-in's report, in
    DCGM's own JSON layout); a result it failed fails the node, named with its GPU."""
    loader = importlib.machinery.SourceFileLoader("fake_dcgmi", str(ROOT / "tests/fakes/dcgmi"))
    spec = importlib.util.spec_from_loader("fake_dcgmi", loader)
    dcgmi = importlib.util.module_from_spec(spec)
    loader.exec_module(dcgmi)
    words = "Persistence mode for GPU 2 is disabled. Enable persistence mode by running ..."
    answers = {"--query-gpu": (0, "\n".join(FAKE.health_rows(4, {}, health.GPU_FIELDS))),
               "--query-remapped-rows": (0, "\n".join(FAKE.remap_rows(4, {})))}
    asked = []

    def smi(args, timeout, tool="nvidia-smi"):
        if tool == "dcgmi":
            asked.append((args, timeout))
            return answers["dcgmi"]
        return answers[args[0].split("=")[0]]
    monkeypatch.setattr(health, "_query_tool", smi)
    monkeypatch.setattr(health.shutil, "which", lambda name: "/bin/" + name)
    answers["dcgmi"] = (226, json.dumps(dcgmi.report(4, (2, words))))
    verdict = health.gate({**CFG, "dcgm_diag": True}, "node3")
    assert asked == [(["diag", "-r", "1", "-j"], health.DCGM_TIMEOUT)]
    assert not verdict["ok"] and verdict["problems"] == [
        {"gpu": 2, "uuid": None, "check": "dcgm_diag",
         "message": f"dcgmi diag -r 1: software on GPU 2: {words}"}]
    assert health.summary(verdict) == f"node3 failed the health gate: dcgmi diag -r 1: software on GPU 2: {words}"
    answers["dcgmi"] = (0, json.dumps(dcgmi.report(4, None)))
    assert health.gate({**CFG, "dcgm_diag": True}, "node3")["ok"]
    assert health.gate(CFG, "node3")["ok"] and len(asked) == 2  # off: not run
    # A failure whose report names nothing (DCGM could not run at all): its status and words.
    answers["dcgmi"] = (226, "Error: Unable to complete diagnostic. Return: (-30) : GPU diag error\n")
    [p] = health.gate({**CFG, "dcgm_diag": True}, "node3")["problems"]
    assert p["message"] == ("dcgmi diag -r 1 failed (status 226): Error: Unable to complete "
                            "diagnostic. Return: (-30) : GPU diag error")
    for hostile in ("[" * 100_000, '{"DCGM Diagnostic": {"test_categories": [{"tests": 7}]}}',
                    json.dumps({"DCGM Diagnostic": {"test_categories": [{"tests": [{"results": [
                        {"status": "Fail", "entity_group": "GPU", "entity_id": True}] * 500}]}]}})):
        got = health.dcgm_failures(hostile)
        assert len(got) <= health.MAX_DCGM_PROBLEMS and all(g["gpu"] is None for g in got)
    monkeypatch.setattr(health.shutil, "which", lambda name: None if name == "dcgmi" else "/bin/" + name)
    absent = health.gate({**CFG, "dcgm_diag": True}, "node3")
    assert absent["ok"] and absent["notes"] == ["dcgmi is not on PATH: the DCGM diagnostic was not run"]


"""Issue 40, items 1 and 5: a node that fails its check is a failure, never a stop; the health
gate judges the job's own GPUs (the rows of the real H100 output, tests/fixtures/nvidia-smi)
and fails closed where nvidia-smi is missing or lacks a field it needs."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys
import types

from hpctrain.job.load import load_job
from hpctrain.job.plan import make_plan
from hpctrain.rank import ending, health, preflight
from tests.conftest import ROOT


def _stop_note(run_dir, rank=0):
    status = run_dir / "status"
    status.mkdir(exist_ok=True)
    (status / f"stop-{rank}.json").write_text(json.dumps({"rank": rank, "signal": "TERM"}))


def test_a_stop_is_a_stop_without_a_failed_node(tmp_path):
    _stop_note(tmp_path)
    assert ending.stopped(str(tmp_path), "TERM", 143) == 0
    assert (tmp_path / "status" / "stopped.json").exists()


def test_a_node_that_failed_its_check_wins_over_the_stop_its_teardown_caused(tmp_path):
    _stop_note(tmp_path)
    (tmp_path / "status" / "preflight-failed-node2.txt").write_text(
        "node2 failed the health gate: GPU 2: 3 uncorrected volatile ECC error(s)\n")
    assert ending.stopped(str(tmp_path), "TERM", 143) == 1
    assert ending.FAILED_NOTES == preflight.FAILED_PREFIX + "*.txt"
    assert not (tmp_path / "status" / "stopped.json").exists()


# ----------------------------------------------------------------------------- item 5: the job's GPUs

_loader = importlib.machinery.SourceFileLoader("fake_smi_gate", str(ROOT / "tests/fakes/nvidia-smi"))
FAKE = importlib.util.module_from_spec(importlib.util.spec_from_loader("fake_smi_gate", _loader))
_loader.exec_module(FAKE)


def _node(monkeypatch, gpus=4, fault="", refuse=None, probe=None, visible=None):
    """The gate's view of a node: nvidia-smi answers as the stand-in does (the real H100 rows of
    tests/fixtures/nvidia-smi, faults written into them), the CUDA probe as `probe` says.
    Returns the calls made."""
    calls = []

    def query(args, timeout, tool="nvidia-smi", env=None):
        calls.append((tool, args, env))
        if tool != "nvidia-smi":
            return probe if probe is not None else (0, '{"failed": []}')
        if refuse is not None:
            return 2, f'Field "{refuse}" is not a valid field to query.\n'
        if args[0].startswith("--query-gpu="):
            return 0, "\n".join(FAKE.health_rows(gpus, FAKE.faults(fault), health.GPU_FIELDS))
        return 0, "\n".join(FAKE.remap_rows(gpus, FAKE.faults(fault)))
    monkeypatch.setattr(health.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(health, "_query_tool", query)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    return calls


def cfg(expected, **more):
    return {**health.DEFAULTS, "expected_gpus": expected, **more}


def test_a_display_servers_memory_on_another_gpu_does_not_refuse_a_one_gpu_job(monkeypatch):
    # A workstation: GPU 3 drives the display (5 GiB in use), the job uses one GPU: cuda:0.
    _node(monkeypatch, fault="memory:3:5120")
    verdict = health.gate(cfg(1), "desk")
    assert verdict["ok"] and [g["index"] for g in verdict["gpus"]] == [0], verdict
    # A job of all four GPUs would train on that one too: refused, named.
    (busy,) = health.gate(cfg(4), "desk")["problems"]
    assert busy["gpu"] == 3 and busy["check"] == "foreign_memory" and "5120 MiB in use" in busy["message"]


def test_the_jobs_gpus_are_those_cuda_visible_devices_names_in_its_order(monkeypatch):
    _node(monkeypatch, fault="ecc:0:1", visible="2,3")
    verdict = health.gate(cfg(2), "ws")  # GPU 0's error is another job's business
    assert verdict["ok"] and [g["index"] for g in verdict["gpus"]] == [2, 3], verdict
    rows = health.parse_gpus("\n".join(FAKE.health_rows(4, {}, health.GPU_FIELDS)))
    assert [r["index"] for r in health.ours(rows, "3,1", 1)] == ["3"]  # the ranks' cuda:0
    uuid = rows[2]["uuid"]
    assert health.ours(rows, uuid, 1) == [rows[2]]
    # Fewer than planned are all kept, and the gpus check names the shortfall.
    _node(monkeypatch, visible="1")
    (short,) = health.gate(cfg(2), "ws")["problems"]
    assert short["message"].startswith("1 of the 2 GPUs the job expects are visible"), short


def test_a_node_without_nvidia_smi_fails_a_gpu_job_unless_the_site_allows_it(monkeypatch):
    monkeypatch.setattr(health.shutil, "which", lambda name: None)
    verdict = health.gate(cfg(4), "node3")
    assert not verdict["ok"] and verdict["problems"][0]["check"] == "gpus"
    assert health.summary(verdict) == (
        "node3 failed the health gate: nvidia-smi is not on PATH: the job asks for 4 GPU(s) a node "
        "and the health gate cannot check them (a site whose nodes have no nvidia-smi sets "
        "health.require_nvidia_smi: false)")
    allowed = health.gate(cfg(4, require_nvidia_smi=False), "node3")
    assert allowed["ok"] and allowed["notes"] == [
        "nvidia-smi is not on PATH: the GPUs were not checked (health.require_nvidia_smi: false)"]
    assert health.gate(cfg(0), "node3")["ok"]  # a job of no GPUs: nothing to check


def test_an_answer_without_a_field_the_gate_reads_fails_the_node(monkeypatch):
    # The stand-in's real error text for a field this driver does not know.
    _node(monkeypatch, refuse="retired_pages.pending")
    (refused,) = health.gate(cfg(4), "node3")["problems"]
    assert refused["message"].startswith('nvidia-smi answered without a field the gate reads '
                                         '(Field "retired_pages.pending" is not a valid field')
    assert health.gate(cfg(4, require_nvidia_smi=False), "node3")["ok"]
    # Rows that lack a column (a driver that prints one field less) are no answer either.
    rows, odd = health._parse("0, GPU-x, NVIDIA H100 80GB HBM3, 00000000:00:06.0, 580.159.04\n")
    assert rows == [] and len(odd) == 1


def test_the_fake_drops_a_field_as_a_driver_that_does_not_know_it(capsys, monkeypatch):
    monkeypatch.setenv("FAKE_SMI_FAULT", "unknown:retired_pages.pending")
    monkeypatch.setenv("FAKE_SMI_GPUS", "2")
    assert FAKE.health([f"--query-gpu={health.GPU_FIELDS}", "--format=csv,noheader,nounits"]) == 2
    assert 'Field "retired_pages.pending" is not a valid field to query.' in capsys.readouterr().out


def test_each_gpu_is_probed_by_cuda_in_a_process_of_its_own(monkeypatch):
    calls = _node(monkeypatch, visible="1,2")
    verdict = health.gate(cfg(2, cuda=True), "node1")
    assert verdict["ok"], verdict
    tool, args, env = calls[-1]
    assert tool == sys.executable and args[1:] == ["cuda-probe", "2"]
    assert os.path.isfile(os.path.join(args[0], "__main__.py"))  # the rank folder, run by path
    uuids = [g["uuid"] for g in verdict["gpus"]]
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(uuids) and uuids[0].endswith("01")
    # A GPU CUDA cannot use fails the node, named by nvidia-smi's index and UUID.
    _node(monkeypatch, visible="1,2", probe=(0, '{"failed": [[1, "RuntimeError: CUDA error: '
                                                 'unspecified launch failure"]]}'))
    (bad,) = health.gate(cfg(2, cuda=True), "node1")["problems"]
    assert bad["gpu"] == 2 and bad["uuid"].endswith("02") and bad["check"] == "cuda"
    assert "a tiny CUDA allocation failed: RuntimeError: CUDA error: unspecified launch" in bad["message"]
    # Not probed: a GPU that already failed a check, or with the probe off.
    calls = _node(monkeypatch, fault="ecc:0:1")
    assert not health.gate(cfg(1, cuda=True), "node1")["ok"]
    assert all(tool == "nvidia-smi" for tool, _, _ in calls)


def test_the_probes_answers_become_problems_or_notes():
    rows = health.parse_gpus("\n".join(FAKE.health_rows(2, {}, health.GPU_FIELDS)))
    assert health.probe_verdict(rows, 0, '{"failed": []}') == ([], [])
    problems, _ = health.probe_verdict(rows, 0, '{"error": "torch sees 0 CUDA device(s) of the 2"}')
    assert problems[0]["message"] == ("CUDA cannot use the GPUs nvidia-smi lists: torch sees 0 "
                                      "CUDA device(s) of the 2")
    assert health.probe_verdict(rows, 0, '{"skip": "torch is not importable by /x/python"}') == (
        [], ["CUDA not probed: torch is not importable by /x/python"])
    (hung,), _ = health.probe_verdict(rows, 124, "python did not answer within 180 s")
    assert hung["message"] == "the CUDA probe failed (status 124): python did not answer within 180 s"
    (crashed,), _ = health.probe_verdict(rows, 0, "Segmentation fault")
    assert crashed["check"] == "cuda"
    # A probe's output is not trusted: an ordinal outside the job's GPUs names none.
    assert health.probe_verdict(rows, 0, '{"failed": [[7, "x"], ["0", "y"]]}') == ([], [])


class _Cuda:
    def __init__(self, count, broken=(), available=True):
        self.count, self.broken, self.available = count, broken, available

    def is_available(self):
        return self.available

    def device_count(self):
        return self.count

    def synchronize(self, i):
        pass


class _Torch(types.ModuleType):
    """torch as the probe uses it: cuda.*, ones(..., device=...), a tensor's sum().item()."""

    def __init__(self, cuda):
        super().__init__("torch")
        self.cuda = cuda

    def ones(self, n, device):
        ordinal = int(device.split(":")[1])
        if ordinal in self.cuda.broken:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return _Tensor(float(n))


class _Tensor:
    def __init__(self, value):
        self.value = value

    def __add__(self, other):
        return _Tensor(self.value + other.value)

    def sum(self):
        return self

    def item(self):
        return self.value


def test_the_probe_allocates_on_each_gpu_with_the_jobs_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", _Torch(_Cuda(2)))
    assert health.probe(2) == {"failed": []}
    monkeypatch.setitem(sys.modules, "torch", _Torch(_Cuda(2, broken=(1,))))
    assert health.probe(2) == {"failed": [[1, "RuntimeError: CUDA error: an illegal memory access "
                                              "was encountered"]]}
    monkeypatch.setitem(sys.modules, "torch", _Torch(_Cuda(0, available=False)))
    assert health.probe(4) == {"error": "torch sees 0 CUDA device(s) of the 4 the job uses "
                                        "(torch.cuda.is_available() is False)"}
    monkeypatch.setitem(sys.modules, "torch", None)  # not importable
    assert health.probe(1)["skip"].startswith(f"torch is not importable by {sys.executable}")


def test_the_plan_probes_cuda_unless_the_ranks_run_on_cpu_and_the_site_may_allow_no_smi(tmp_path):
    def gate(site_extra=None, **job):
        site = {"name": "g", "scheduler": "slurm", "limits": {"max_gpus_per_node": 8},
                **(site_extra or {})}
        (tmp_path / "g.yaml").write_text(json.dumps(site))
        spec = {"name": "h", "script": "train.py", "resources": {"nodes": 2, "gpus_per_node": 4},
                **job}
        return make_plan(load_job(spec, site=str(tmp_path / "g.yaml")),
                         str(tmp_path / "run")).bootstrap["health"]
    assert gate()["cuda"] is True and gate()["require_nvidia_smi"] is True
    assert gate({"cpu_mode": "on"})["cuda"] is False
    assert gate(health={"cuda": False})["cuda"] is False
    assert gate({"health": {"require_nvidia_smi": False}})["require_nvidia_smi"] is False

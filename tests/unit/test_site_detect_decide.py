"""site detect's decisions from evidence (backends/slurm/detect.py) and the doctor's gate
(rank/probe.problems): pure logic over recorded answers; the cluster tests run the real thing."""
from __future__ import annotations

import yaml

import pytest

from hpctrain.backends.slurm.detect import decide, scontrol_config, sinfo_partitions, slurm_time
from hpctrain.job.checks import check_site
from hpctrain.rank.before import probe
from hpctrain.schema.spec import convert_site
from hpctrain.schema.yamlfile import load_file

CONFIG = scontrol_config("""Configuration data as of 2026-11-23T10:00:00
ClusterName             = big
GresTypes               = gpu
KillWait                = 30 sec
MaxArraySize            = 1001
PreemptMode             = REQUEUE
PreemptType             = preempt/qos
SelectType              = select/cons_tres
SlurmctldParameters     = enable_configless,preempt_send_user_signal
SLURM_VERSION           = 23.02.7
""")
SINFO = ("gpu*|2-00:00:00|10|64|512000|gpu:a100:4(S:0-1)|g[01-10]\n"
         "gpu*|2-00:00:00|2|128|1024000|gpu:a100:8|g[11-12]\n"
         "cpu|30:00|40|32|256000|(null)|c[01-40]\n")


def facts(node, own_loopback=False, ib=True):
    return {"node": node, "python": {"executable": "/opt/py/bin/python", "version": "3.11.7"},
            "interfaces": [{"name": "lo", "ipv4": "127.0.0.1", "loopback": True, "prefix": 8, "up": True},
                           {"name": "eth0", "ipv4": f"10.0.0.{node[-1]}", "loopback": False, "prefix": 16, "up": True},
                           {"name": "ib0", "ipv4": f"10.1.0.{node[-1]}", "loopback": False, "prefix": 16, "up": True}],
            "infiniband": [{"name": "mlx5_0", "ports": [], "netdevs": ["ib0"]}] if ib else [],
            "resolve": [{"name": "g01", "address": "127.0.1.1" if own_loopback else "10.0.0.1",
                         "loopback": own_loopback}],
            "gpus": {"gpus": [{"name": "NVIDIA A100-SXM4-80GB"}], "nvlink": True},
            "modules": {"in_shell": None, "inits": ["/usr/share/lmod/lmod/init/bash"]},
            "writable": {"dir": "/scratch/run/checkpoints", "ok": True}}


def evidence(reached: dict[str, bool], own_loopback=False):
    results = [{"target": t, "address": "10.0.0.1", "ok": ok} | ({} if ok else {"error": "timed out"})
               for t, ok in reached.items()]
    return {"job": "77", "port": 62000,
            "facts": [facts("g01", own_loopback), facts("g02")],
            "reach": [{"role": "head", "node": "g01"},
                      {"role": "peer", "node": "g02", "head": "g01", "results": results}]}


def profile(tmp_path, text):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    doc = load_file(path)
    site = convert_site(doc)
    check_site(site, doc)  # what `--site FILE` does: the written profile is valid
    return yaml.safe_load(text)


def test_partitions_time_and_scontrol_are_read():
    parts = sinfo_partitions(SINFO)
    assert parts["gpu"]["default"] and parts["gpu"]["nodes"] == 12
    assert parts["gpu"]["gpus"] == [4, 8] and parts["gpu"]["gpu_types"] == {"a100"}
    assert parts["cpu"]["gpus"] == [0] and not parts["cpu"]["default"]
    assert slurm_time("2-00:00:00") == "48:00:00" and slurm_time("30:00") == "00:30:00"
    assert slurm_time("infinite") is None
    assert CONFIG["SelectType"] == "select/cons_tres" and CONFIG["MaxArraySize"] == "1001"


def test_gpu_cluster_profile_nodename_with_every_reason(tmp_path):
    text, todo = decide("big", CONFIG, sinfo_partitions(SINFO), None,
                        evidence({"g01": True, "g01-ib": False, "10.0.0.1": True}), ["python"])
    doc = profile(tmp_path, text)
    assert todo == []
    assert doc["gpu_request"] == "gpus-per-node" and doc["gpu_type"] == "a100"
    assert doc["cpu_mode"] == "auto" and doc["head"] == {"mode": "nodename"}
    assert doc["limits"] == {"max_nodes": 12, "cpus_per_node": 64, "mem_per_node": "512000M",
                             "max_gpus_per_node": 8, "max_time": "48:00:00", "max_array_size": 1000}
    assert doc["module_init"] == "/usr/share/lmod/lmod/init/bash"
    assert doc["defaults"]["resources"]["partition"] == "gpu"
    assert "preempt_send_user_signal is set" in text and "KillWait=30 sec" in text
    assert "InfiniBand devices: mlx5_0" in text and "NVLink" in text
    assert "select/cons_tres takes --gpus-per-node" in text


def test_loopback_head_name_chooses_suffix_then_interface(tmp_path):
    ev = evidence({"g01": True, "g01-ib": True, "10.0.0.1": True}, own_loopback=True)
    doc = profile(tmp_path, decide("s", CONFIG, sinfo_partitions(SINFO), "gpu", ev, ["py"])[0])
    assert doc["head"] == {"mode": "suffix", "suffix": "-ib"}
    ev = evidence({"g01": True, "g01-ib": False, "10.0.0.1": True}, own_loopback=True)
    text, _ = decide("s", CONFIG, sinfo_partitions(SINFO), "gpu", ev, ["py"])
    assert profile(tmp_path, text)["head"] == {"mode": "interface", "interface": "eth0"}
    assert "'g01' -> 127.0.1.1 (loopback!)" in text


def test_unreachable_head_and_mixed_gpus_are_marked_todo(tmp_path):
    sinfo = SINFO + "mix|1:00:00|2|32|1000|gpu:v100:2,gpu:a100:2|m[1-2]\n"
    old = dict(CONFIG, SelectType="select/cons_res")
    text, todo = decide("s", old, sinfo_partitions(sinfo), "mix",
                        evidence({"g01": False, "10.0.0.1": False}), ["py"])
    doc = profile(tmp_path, text)
    assert doc["gpu_request"] == "gres"
    assert any("mixes GPU types a100, v100" in t for t in todo)
    assert any("by no name or address" in t for t in todo)
    assert "# TODO: " in text


def test_no_probe_marks_the_head_and_cpu_partition_runs_on_cpu(tmp_path):
    text, todo = decide("s", CONFIG, sinfo_partitions(SINFO), "cpu", None, ["py"])
    doc = profile(tmp_path, text)
    assert doc["cpu_mode"] == "on" and "gpu_request" not in doc
    assert doc["limits"]["max_time"] == "00:30:00"
    assert any("no probe job ran" in t for t in todo)


def test_gate_names_loopback_unwritable_and_missing_nodes():
    ok = [facts("g01"), facts("g02")]
    assert probe.problems("g01", ok, 2) == []
    bad = [facts("g01", own_loopback=True), dict(facts("g02"), writable={
        "dir": "/r/checkpoints", "ok": False, "error": "Read-only file system (EROFS)"})]
    found = probe.problems("g01", bad, 3)
    assert found[0] == "only 2 of 3 nodes reported their facts (g01, g02)"
    assert "the head name 'g01' resolves to loopback 127.0.1.1 on g01" in found[1]
    assert found[2] == "/r/checkpoints is not writable from g02: Read-only file system (EROFS)"


def test_candidates_try_name_suffixes_and_addresses():
    got = probe.candidates(facts("g01"))
    assert got[:3] == ["g01", "g01-ib", "g01i"] and "10.1.0.1" in got and "127.0.0.1" not in got


def test_cli_refuses_what_it_cannot_do_with_exit_2(cli):
    bad = cli("site", "detect", "../x", check=False)
    assert bad.returncode == 2 and "is not a valid name" in bad.stderr
    one_node = cli("doctor", "--site", "local", check=False)
    assert one_node.returncode == 2 and "doctor checks two nodes" in one_node.stderr
    assert "name a Slurm site" in one_node.stderr


def test_long_records_survive_interleaved_task_output(capsys):
    big = dict(facts("g01"), pad="x" * 3000)
    probe.emit(big)
    probe.emit({"node": "g02", "short": True})
    lines = capsys.readouterr().out.splitlines()
    chunks = [x for x in lines if x.startswith("@")]
    assert len(chunks) > 5 and all(len(x) < 600 for x in lines)
    # another task's line lands between the chunks; a stray half line is left out
    mixed = chunks[:3] + [lines[-1], '{"broken": '] + chunks[3:]
    got = probe.read_records("\n".join(mixed))
    assert {"node": "g02", "short": True} in got and big in got and len(got) == 2
    assert probe.read_records("\n".join(chunks[:-1])) == []  # incomplete: not reported


@pytest.mark.parametrize("limit,want", [("1-2", "26:00:00"), ("1-2:30", "26:30:00"), ("90", "01:30:00"),
                                        ("5:00", "00:05:00"), ("UNLIMITED", None)])
def test_every_slurm_time_form(limit, want):
    assert slurm_time(limit) == want


@pytest.mark.parametrize("odd", ["abc", "1-xx:00", "::", "-", "99999999999-00:00:00", "1-2:3:4:5",
                                 "1:2:3:4", "٣:00", "30:00\n#SBATCH", "-5"])
def test_an_odd_sinfo_time_limit_is_a_todo_not_a_crash(tmp_path, odd):
    with pytest.raises(ValueError):
        slurm_time(odd)
    sinfo = SINFO.replace("gpu*|2-00:00:00|", f"gpu*|{odd}|") if "\n" not in odd else SINFO
    text, todo = decide("s", CONFIG, sinfo_partitions(sinfo), "gpu",
                        evidence({"g01": True, "10.0.0.1": True}), ["py"])
    if "\n" not in odd:
        assert any("fill in max_time by hand" in t for t in todo), todo
        assert "max_time" not in profile(tmp_path, text)["limits"]

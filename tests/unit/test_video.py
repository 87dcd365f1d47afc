"""Video only where GPUs can render (issue 52, item 3): the one table of GPU models against the
names real nvidia-smi output and Slurm GRES types carry, a video job routed by the site's
gpu_models (which `site detect` writes from sinfo) and refused, before queueing, where its GPUs
cannot render or cannot be told; hostile sinfo and nvidia-smi text stays bounded and inert; the
Isaac Lab adapter's --video flags, and the clip count held on the rank."""
from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

import pytest
import yaml

from hpctrain.backends.slurm.detect import decide, sinfo_partitions
from hpctrain.cli import main
from hpctrain.errors import HpctrainError
from hpctrain.job import video
from hpctrain.job.load import load_job
from hpctrain.job.plan import gpu_request
from hpctrain.libraries import adapter
from hpctrain.rank.before.gpu_models import (MAX_GPUS, MAX_NAME, smi_names, verdict, verdicts,
                                             visible_indexes)
from hpctrain.rank.during.video import counted
from tests.conftest import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "nvidia-smi" / "nvidia-smi-h100.txt"

# sinfo -h -o '%P|%l|%D|%c|%m|%G|%N|%f' of a cluster with compute and rendering partitions
SINFO = ("gpu*|2-00:00:00|12|64|512000|gpu:h100:8(S:0-1)|g[01-12]|ib,h100\n"
         "viz|12:00:00|2|32|256000|gpu:l40s:4|v[01-02]|rtx,l40s\n"
         "old|1-00:00:00|2|32|256000|gpu:v100:4|o[01-02]|\n"
         "cpu|2-00:00:00|8|128|512000|(null)|c[01-08]|ib\n")
CONFIG = {"SelectType": "select/cons_tres", "SLURM_VERSION": "24.11.5"}


def test_the_real_nvidia_smi_names_and_gres_types_are_read_by_the_one_table():
    text = FIXTURE.read_text()
    listed = text.split("## nvidia-smi -L\n", 1)[1].split("\n", 1)[0]  # GPU 0: NVIDIA H100 ...
    name = listed.split(": ", 1)[1].split(" (UUID", 1)[0]
    assert name == "NVIDIA H100 80GB HBM3"
    assert verdict(name) == (name, "H100", False)
    row = text.split("--format=csv,noheader,nounits\n", 1)[1].split("\n", 1)[0]
    assert verdict(row.split(", ")[2]).renders is False  # the health query's name column
    cannot = ["NVIDIA A100-SXM4-80GB", "NVIDIA H200", "NVIDIA B200", "Tesla V100-SXM2-32GB",
              "NVIDIA A30", "NVIDIA GH200 480GB", "h100", "a100", "nvidia_a100-sxm4-80gb",
              "nvidia_h100_80gb_hbm3", "v100"]
    can = ["NVIDIA L40S", "NVIDIA L40", "NVIDIA L4", "NVIDIA A10G", "NVIDIA A10", "NVIDIA A40",
           "NVIDIA RTX A6000", "NVIDIA RTX 6000 Ada Generation", "NVIDIA GeForce RTX 4090",
           "Quadro RTX 8000", "Tesla T4", "l40s", "a10g", "rtx_a6000", "rtx6000", "nvidia_l40s"]
    assert [n for n in cannot if verdict(n).renders is not False] == []
    assert [n for n in can if verdict(n).renders is not True] == []
    assert verdict("NVIDIA RTX A6000").model == "RTX A6000"  # the table's model, not the family
    # Never a guess: a model the table lacks, a bare word, models of both kinds in one name.
    for unknown in ("AMD Instinct MI300X", "gpu", "tesla", "", "a100 rtx", "1g.10gb"):
        assert verdict(unknown).renders is None, unknown
        assert "unknown: cannot tell" in verdict(unknown).text()
    assert verdicts(["h100", "l40s"])[0] is False and verdicts(["l40s", "mi300x"])[0] is None
    assert verdicts([])[0] is False and verdicts(["l4", "a10g"])[0] is True


def test_hostile_nvidia_smi_output_is_bounded_and_printable():
    text = "0, NVIDIA L40S\x1b[2J\n" + "\n".join([f"1, {'x' * 5000}"] * 10_000) + "\n"
    names = smi_names(text)
    assert len(names) == MAX_GPUS and all(len(n) <= MAX_NAME and n.isprintable() for n in names)
    assert names[0] == "NVIDIA L40S?[2J" and verdict(names[0]).renders is True
    assert verdict("\x1b]52;c;ZXZpbA==\x07" + "a" * 10_000).renders is None
    assert smi_names("\n \nNVIDIA L40S\n-1, x\n") == []  # only "index, name" rows


def test_only_the_gpus_cuda_visible_devices_leaves_are_asked():
    rows = "0, NVIDIA H100 80GB HBM3\n1, NVIDIA L40S\n"
    assert smi_names(rows, visible_indexes("1")) == ["NVIDIA L40S"]
    assert smi_names(rows, visible_indexes(None)) == ["NVIDIA H100 80GB HBM3", "NVIDIA L40S"]
    assert smi_names(rows, visible_indexes("GPU-c1f2461c")) == smi_names(rows)  # by UUID: all
    assert smi_names(rows, visible_indexes("1,-1,0")) == ["NVIDIA L40S"]  # CUDA stops at -1
    assert smi_names(rows, visible_indexes("-1")) == []


def _site(tmp_path, text: str):
    path = tmp_path / "site.yaml"
    path.write_text(text)
    return str(path)


def _job(tmp_path, site: str, *sets: str):
    job = {"name": "v", "library": "rsl_rl", "task": "Isaac-Cartpole", "isaaclab": "/opt/lab",
           "isaaclab_version": "3.0.0", "resources": {"gpus_per_node": 1},
           "video": {"length": 100, "count": 3, "interval": 500}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    return load_job(str(tmp_path / "job.yaml"), site=site, overrides=sets)


def test_site_detect_records_each_partitions_gpus_and_a_video_job_goes_where_they_render(tmp_path):
    text, _ = decide("big", CONFIG, sinfo_partitions(SINFO), None, None, ["python"])
    site = _site(tmp_path, text)
    doc = yaml.safe_load(text)
    assert doc["gpu_models"] == {"gpu": ["h100"], "viz": ["l40s", "rtx"], "old": ["v100"]}
    assert "viz: l40s: L40S renders (RT cores)" in text and "gpu: h100: H100 cannot render" in text
    # On the default partition (H100): refused before anything is queued, naming viz.
    job = _job(tmp_path, site)
    with pytest.raises(HpctrainError) as e:
        video.check(job)
    assert "GPUs of partition 'gpu' cannot render: h100: H100 cannot render (no RT cores)" in e.value.what
    assert "send it to partition 'viz'" in e.value.fix and "--set resources.partition=viz" in e.value.fix
    # On viz: accepted; the request asks for that partition's GPUs, not the site's gpu_type.
    job = _job(tmp_path, site, "resources.partition=viz")
    assert video.check(job) == ("3 clips of 100 steps, every 500; partition 'viz': l40s: L40S "
                                "renders (RT cores); rtx: RTX renders (RT cores)")
    assert job.site.gpu_type == "h100" and gpu_request(job) == ("gpus-per-node", "1")
    assert gpu_request(_job(tmp_path, site)) == ("gpus-per-node", "h100:1")
    # No GPU asked for: refused too.
    with pytest.raises(HpctrainError, match="for no GPU"):
        video.check(_job(tmp_path, site, "resources.partition=viz", "resources.gpus_per_node=0"))
    # Without video: nothing is asked of the partition.
    assert video.check(_job(tmp_path, site, "video=null")) is None


def test_a_site_with_no_rendering_partition_or_unknown_gpus_says_so(tmp_path):
    none = _site(tmp_path, "name: s\nscheduler: slurm\ngpu_models: {gpu: [a100], big: [b200]}\n")
    with pytest.raises(HpctrainError) as e:
        video.check(_job(tmp_path, none, "resources.partition=gpu"))
    assert "cannot render: a100: A100" in e.value.what
    assert "no partition of site 's' has GPUs known to render" in e.value.fix
    odd = _site(tmp_path, "name: s\nscheduler: slurm\ngpu_models: {odd: [mi300x], viz: [l4]}\n")
    with pytest.raises(HpctrainError) as e:
        video.check(_job(tmp_path, odd, "resources.partition=odd"))
    assert "cannot tell whether the GPUs of partition 'odd' can render" in e.value.what
    assert "mi300x: unknown: cannot tell" in e.value.what and "partition 'viz'" in e.value.fix
    for sets in (["resources.partition=elsewhere"], []):
        with pytest.raises(HpctrainError, match="cannot tell"):
            video.check(_job(tmp_path, odd, *sets))
    # A site whose gpu_type pins every request: that model decides, whatever the partition.
    pinned = _site(tmp_path, "name: s\nscheduler: slurm\ngpu_type: a100\n")
    with pytest.raises(HpctrainError) as e:
        video.check(_job(tmp_path, pinned, "resources.partition=any"))
    assert "a100: A100 cannot render" in e.value.what and "gpu_type asks for a100" in e.value.what
    video.check(_job(tmp_path, _site(tmp_path, "name: s\nscheduler: slurm\ngpu_type: l40s\n")))


def test_the_refusal_is_one_error_line_and_exit_2_through_the_cli(tmp_path, monkeypatch):
    text, _ = decide("big", CONFIG, sinfo_partitions(SINFO), None, None, ["python"])
    site = _site(tmp_path, text)
    _job(tmp_path, site)
    monkeypatch.chdir(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(["validate", "job.yaml", "--site", site])
    lines = err.getvalue().splitlines()
    assert rc == 2 and out.getvalue() == "", (out.getvalue(), err.getvalue())
    assert len([l for l in lines if l.startswith("error:")]) == 1 and "Traceback" not in err.getvalue()
    assert "partition 'viz'" in err.getvalue()


def test_hostile_sinfo_never_adds_a_key_and_the_profile_loads(tmp_path):
    hostile = ("gpu*|1:00:00|1|8|1000|gpu:h100\x1b[2J:4,gpu:a100\nname: evil:2|g1|l40s\x1b]0;x\x07\n"
               "viz\nscheduler: local|1:00:00|1|8|1000|gpu:l40s:4|v1|rtx\n"
               "p$(id)|1:00:00|1|8|1000|gpu:l40s:4|v1|\n"
               + "".join(f"p{i}|1:00:00|1|8|1000|gpu:l4:1|n{i}|\n" for i in range(5000)))
    parts = sinfo_partitions(hostile)
    assert len(parts) <= 256
    text, _ = decide("big", CONFIG, parts, "gpu", None, ["python"])
    doc = yaml.safe_load(text)
    assert doc["name"] == "big" and doc["scheduler"] == "slurm"
    models = doc["gpu_models"]
    assert len(models) <= 256 and all(len(v) <= 16 for v in models.values())
    assert "p$(id)" not in models and not any("\n" in p or "\x1b" in p for p in models)
    assert all(m.replace("_", "").replace("-", "").replace(".", "").isalnum()
               for v in models.values() for m in v), models
    load_job({"name": "x", "resources": {"gpus_per_node": 0}}, site=_site(tmp_path, text))


def test_isaaclab_adapter_adds_video_flags_by_generation_and_plain_programs_get_the_bounds(tmp_path):
    site = _site(tmp_path, "name: s\nscheduler: slurm\ngpu_models: {viz: [l40s]}\n")
    lab = adapter("rsl_rl")
    three = _job(tmp_path, site, "resources.partition=viz").spec
    assert lab.program(three)[-3:] == ["--video", "--video_length=100", "--video_interval=500"]
    one = _job(tmp_path, site, "video.count=1").spec  # 3.0: interval 0 is one clip
    assert lab.program(one)[-1] == "--video_interval=0"
    two = _job(tmp_path, site, "isaaclab_version=2.3.2").spec
    assert lab.program(two)[-4:] == ["--video", "--video_length=100", "--video_interval=500",
                                     "--enable_cameras"]
    assert "--video" not in lab.program(_job(tmp_path, site, "video=null").spec)
    own = _job(tmp_path, site, "script=train.py").spec  # the user's program: its args only
    assert "--video" not in lab.program(own)
    assert lab.env(own) == {"HPCTRAIN_VIDEO_LENGTH": "100", "HPCTRAIN_VIDEO_COUNT": "3",
                            "HPCTRAIN_VIDEO_INTERVAL": "500"}
    for bad in ("video.length=0", "video.length=2001", "video.count=21", "video.interval=50"):
        with pytest.raises(HpctrainError):
            _job(tmp_path, site, bad)


def test_the_clip_count_is_held_by_the_trigger():
    capped = counted(lambda step: step % 10 == 0, 2)
    assert [s for s in range(100) if capped(s)] == [0, 10]

"""hpctrain.hostlist against the real `scontrol show hostnames` / `show hostlist` of this machine.

scontrol expands locally (it needs slurm.conf, not the controller); where it cannot run, the
comparisons skip and the literal cases below still pin the rules.
"""
from __future__ import annotations

import random
import shutil
import subprocess

import pytest

from hpctrain import hostlist

PATTERNS = [
    "node1", "node[1-4]", "node[0001-0010]", "n[09-11]", "n[9-011]", "n[001-3]", "n[0-2]",
    "n[00-02]", "a[1,3-4,06-07]", "rack[1-2]-node[01-03]", "x[1-2][3-4]", "n[1-2]x[3-4]y[5-6]",
    "b,a,c[3,1]", "n[1-3],n2", "a b\tc", "n[1-2],,m", "[1-2]", "n-1", "n1]", "n[2-2]",
    "gpu[1-3],cpu[10-12],login1", "node[1-2],node[3-4]", "a.b.c[1-2]",
    "node[0998-1002]", "dgx-a100-[001-003,010]", "c[1-2]-r[1-2]-n[01-02]", "n[1- 2]",
    "a[1-2]b[1-3]c[1-2]d[1-2]", "a[1-2] b[3-4],c", "x[1-2]y[3]",
]
INVALID = ["n[1-3]-ib", "n[3-1]", "n[]", "n[1-2,]", "n[1-3].dom", "n[1-2]b,n[3-4]",
           "n[010-8]", "n[a-b]", "n[1-2"]


def _scontrol(*args: str) -> subprocess.CompletedProcess | None:
    if shutil.which("scontrol") is None:
        return None
    proc = subprocess.run(["scontrol", "show", *args], capture_output=True, text=True, timeout=30)
    if "Unable to process configuration file" in proc.stderr:
        return None
    return proc


def scontrol_hostnames(text: str) -> list[str]:
    proc = _scontrol("hostnames", text)
    if proc is None:
        pytest.skip("scontrol cannot run here")
    if "Invalid hostlist" in proc.stdout + proc.stderr or "Invalid range" in proc.stderr:
        raise ValueError(proc.stdout + proc.stderr)
    return proc.stdout.split()


@pytest.mark.parametrize("text", PATTERNS)
def test_expand_matches_scontrol(text):
    assert hostlist.expand(text) == scontrol_hostnames(text)


@pytest.mark.parametrize("text", PATTERNS)
def test_first_is_the_first_expanded(text):
    assert hostlist.first(text) == hostlist.expand(text)[0]


@pytest.mark.parametrize("text", INVALID)
def test_invalid_is_an_error(text):
    with pytest.raises(ValueError):
        hostlist.expand(text)


@pytest.mark.parametrize("text", [p for p in INVALID if p != "n[1-2"])  # scontrol prints "n]"
def test_scontrol_rejects_the_same(text):
    with pytest.raises(ValueError):
        scontrol_hostnames(text)


def test_large_lists_match_scontrol():
    rnd = random.Random(7)
    ranges, start = [], 1
    for _ in range(200):
        start += rnd.randint(1, 30)
        end = start + rnd.randint(0, 40)
        ranges.append(f"{start:05d}-{end:05d}" if rnd.random() < 0.7 else f"{start:05d}")
        start = end
    fragmented = ",".join(f"{p}[{r}]" for p in ("gpu", "cpu") for r in ranges) + ",login01"
    for text in ("node[00001-10000]", fragmented):
        assert hostlist.expand(text) == scontrol_hostnames(text)


def test_literal_rules():
    assert hostlist.expand("rack[1-2]-node[01-02]") == [
        "rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]
    assert hostlist.expand("n[9-011]") == ["n9", "n10", "n11"]
    assert hostlist.expand("n[001-3]") == ["n001", "n002", "n003"]
    assert hostlist.expand("b,a,b") == ["b", "a", "b"]
    assert hostlist.expand("") == []
    assert hostlist.first("node[0001-0004],x") == "node0001"


COMPRESS = [
    "n3,n1,n2", "n1,n2,n3,m1,n4", "n9,n10,n011", "n01,n2,n03", "a,b,c", "n1,n1,n2",
    "rack1-node01,rack1-node02,rack2-node01", "n1x3,n1x4", "n007,n8", "n09,n10,n11",
    "node1,node2,node3,node4", "1,2,3",
]


@pytest.mark.parametrize("names", COMPRESS)
def test_compress_matches_scontrol(names):
    proc = _scontrol("hostlist", names)
    if proc is None:
        pytest.skip("scontrol cannot run here")
    assert hostlist.compress(names.split(",")) == proc.stdout.strip()


@pytest.mark.parametrize("text", PATTERNS)
def test_compress_round_trips(text):
    names = hostlist.expand(text)
    assert hostlist.expand(hostlist.compress(names)) == names

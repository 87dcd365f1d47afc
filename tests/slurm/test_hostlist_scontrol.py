"""hpctrain.hostlist against the real `scontrol show hostnames` / `show hostlist`.

scontrol expands locally: it needs Slurm installed and a slurm.conf, not a running controller,
so these take the cluster (whose up.sh writes slurm.conf) only where scontrol cannot read one.
The pure rules are pinned in tests/unit/test_hostlist.py, whose patterns these reuse.
"""
from __future__ import annotations

import random
import subprocess

import pytest

from hpctrain.backends.ssh import hostlist
from tests.unit.test_hostlist import INVALID, PATTERNS


COMPRESS = [
    "n3,n1,n2", "n1,n2,n3,m1,n4", "n9,n10,n011", "n01,n2,n03", "a,b,c", "n1,n1,n2",
    "rack1-node01,rack1-node02,rack2-node01", "n1x3,n1x4", "n007,n8", "n09,n10,n11",
    "node1,node2,node3,node4", "1,2,3",
]


def _scontrol(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["scontrol", "show", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module", autouse=True)
def _slurm_conf(request):
    if "Unable to process configuration file" in _scontrol("hostnames", "n1").stderr:
        request.getfixturevalue("cluster")
    proc = _scontrol("hostnames", "n1")
    assert proc.returncode == 0, f"scontrol cannot run here: {proc.stderr}"


def scontrol_hostnames(text: str) -> list[str]:
    proc = _scontrol("hostnames", text)
    if "Invalid hostlist" in proc.stdout + proc.stderr or "Invalid range" in proc.stderr:
        raise ValueError(proc.stdout + proc.stderr)
    return proc.stdout.split()


@pytest.mark.parametrize("text", PATTERNS)
def test_expand_matches_scontrol(text):
    assert hostlist.expand(text) == scontrol_hostnames(text)


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


@pytest.mark.parametrize("names", COMPRESS)
def test_compress_matches_scontrol(names):
    assert hostlist.compress(names.split(",")) == _scontrol("hostlist", names).stdout.strip()

"""hpctrain.backends.ssh.hostlist's rules, pure: literal cases and round trips. The same patterns are compared
with the real `scontrol show hostnames` / `show hostlist` in tests/slurm/test_hostlist_scontrol.py
(the tier that installs Slurm).
"""
from __future__ import annotations

import pytest

from hpctrain.backends.ssh import hostlist

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


@pytest.mark.parametrize("text", PATTERNS)
def test_first_is_the_first_expanded(text):
    assert hostlist.first(text) == hostlist.expand(text)[0]


@pytest.mark.parametrize("text", INVALID)
def test_invalid_is_an_error(text):
    with pytest.raises(ValueError):
        hostlist.expand(text)


def test_literal_rules():
    assert hostlist.expand("rack[1-2]-node[01-02]") == [
        "rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]
    assert hostlist.expand("n[9-011]") == ["n9", "n10", "n11"]
    assert hostlist.expand("n[001-3]") == ["n001", "n002", "n003"]
    assert hostlist.expand("b,a,b") == ["b", "a", "b"]
    assert hostlist.expand("") == []
    assert hostlist.first("node[0001-0004],x") == "node0001"
    # compress keeps the order and the widths it is given, as scontrol does
    assert hostlist.compress(["n3", "n1", "n2"]) == "n[3,1-2]"
    assert hostlist.compress(["n9", "n10", "n011"]) == "n[9-10,011]"
    assert hostlist.compress(["n1", "n2", "n3", "m1", "n4"]) == "n[1-3],m1,n4"


@pytest.mark.parametrize("text", PATTERNS)
def test_compress_round_trips(text):
    names = hostlist.expand(text)
    assert hostlist.expand(hostlist.compress(names)) == names

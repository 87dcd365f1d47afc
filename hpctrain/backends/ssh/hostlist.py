"""Slurm node-list expressions (`node[001-128],gpu[1-3,7]`), with scontrol's own rules.

Stdlib only and no scheduler needed: status and preflight name nodes on machines where `scontrol`
is absent (a laptop following a run) or slow (a busy controller), and the bootstrap may import
this under another interpreter.

The rules, as `scontrol show hostnames` / `show hostlist` of Slurm 22.05 apply them (the unit
tests compare with the real commands):
- items are separated by commas or whitespace outside brackets; empty items are dropped;
  order and duplicates are kept (`b,a,b` -> b a b);
- a bracket holds comma-separated numbers or `lo-hi` ranges; the width of `lo` is the width of
  every name in the range (`[09-11]` -> 09 10 11, `[9-011]` -> 9 10 11, `[001-3]` -> 001..003);
- several bracket groups multiply (`r[1-2]n[1-2]` -> r1n1 r1n2 r2n1 r2n2; with three or more the
  last group varies fastest, then the first, then the second...);
  text after the last group is an error (`n[1-3]-ib`), as are `hi < lo`, empty ranges and
  unbalanced brackets.
"""
from __future__ import annotations

import re
from itertools import product

__all__ = ["expand", "first", "compress"]

_GROUP = re.compile(r"\[([^\[\]]*)\]")
_ITEM = re.compile(r"(?:[^,\[]|\[[^\]]*\])+")
_BODY = re.compile(r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*", re.ASCII)
_RANGE = re.compile(r"(\d+)(?:-(\d+))?", re.ASCII)
_TRAILING_DIGITS = re.compile(r"^(.*?)(\d+)$", re.DOTALL)


def _without_whitespace(text: str) -> str:
    """Whitespace separates items outside brackets; inside (`[1- 2]`) scontrol ignores it."""
    out, depth = [], 0
    for c in text:
        if c == "[":
            depth += 1
        elif c == "]":
            depth = max(0, depth - 1)
        elif c.isspace():
            c = "" if depth else ","
        out.append(c)
    return "".join(out)


def _items(text: str) -> list[str]:
    """The top-level items: split at commas and whitespace that are not inside brackets."""
    if not text.isprintable() or " " in text:
        text = _without_whitespace(text)
    if "[" not in text:
        return [p for p in text.split(",") if p]
    items = _ITEM.findall(text)  # brackets do not nest: one regex pass finds every item
    if sum(i.count("[") for i in items) != text.count("["):
        raise ValueError(f"invalid hostlist {text!r}: '[' is never closed")
    return items


def _ranges(body: str, item: str) -> list[tuple[int, int, str]]:
    """(lo, hi, lo as written) for each range of one bracket body; one C-speed regex pass, as an
    allocation scattered over thousands of short ranges has thousands of them."""
    if _BODY.fullmatch(body) is None:
        raise ValueError(f"invalid hostlist {item!r}: bad range in [{body}]")
    out = []
    for lo, hi in _RANGE.findall(body):
        a = int(lo)
        b = int(hi) if hi else a
        if b < a:
            raise ValueError(f"invalid hostlist {item!r}: range {lo}-{hi} runs backwards")
        out.append((a, b, lo))
    return out


def _names(head: str, ranges: list[tuple[int, int, str]]) -> list[str]:
    """head + every number of the ranges, each as wide as its range's low bound is written
    (`%0{width}d` of the low bound gives it back exactly, so singletons take the same path)."""
    escaped = head.replace("%", "%%")
    # One comprehension over all ranges: a list per range costs more than its few names.
    specs = [(f"{escaped}%0{len(lo)}d", a, b + 1) for a, b, lo in ranges]
    return [fmt % i for fmt, a, stop in specs for i in range(a, stop)]


def _groups(item: str) -> tuple[list[tuple[str, str]], str]:
    """[(text before the group, group body), ...] and what follows the last group."""
    groups, pos = [], 0
    for m in _GROUP.finditer(item):
        groups.append((item[pos:m.start()], m.group(1)))
        pos = m.end()
    tail = item[pos:]
    if "[" in tail or (groups and "]" in tail):
        raise ValueError(f"invalid hostlist {item!r}: unbalanced brackets")
    if groups and tail:
        raise ValueError(f"invalid hostlist {item!r}: text after the last ']' ({tail!r})")
    return groups, tail


def _expand_item(item: str) -> list[str]:
    groups, tail = _groups(item)
    if not groups:
        return [item]
    if len(groups) == 1:
        return _names(groups[0][0], _ranges(groups[0][1], item))
    numbers = [_names("", _ranges(body, item)) for _, body in groups]
    # Slurm's order: the last group varies fastest, then the first, the second, ... the one
    # before last slowest (`a[1-2]b[1-2]c[1-2]` -> a1b1c1 a1b1c2 a2b1c1 a2b1c2 a1b2c1 ...).
    order = list(range(len(groups) - 2, -1, -1)) + [len(groups) - 1]
    texts = [t for t, _ in groups]
    names = []
    for combo in product(*(numbers[i] for i in order)):
        values = [""] * len(groups)
        for k, i in enumerate(order):
            values[i] = combo[k]
        names.append("".join(t + v for t, v in zip(texts, values)))
    return names


def count(text: str) -> int:
    """How many names expand(text) gives, without making them (a range of 10^8 hosts is counted,
    not listed). ValueError as expand raises it."""
    total = 0
    for item in _items(text):
        groups, _ = _groups(item) if "[" in item or "]" in item else ([], "")
        n = 1
        for _, body in groups:
            n *= sum(b - a + 1 for a, b, _ in _ranges(body, item))
        total += n
    return total


def expand(text: str, limit: int | None = None) -> list[str]:
    """Every host name of a Slurm node list, in scontrol's order (`scontrol show hostnames`);
    ValueError when it names more than `limit` (checked before any is made)."""
    if limit is not None and (n := count(text)) > limit:
        raise ValueError(f"the host list names {n} hosts, more than {limit}")
    if "[" not in text and "]" not in text:
        return _items(text)
    out: list[str] = []
    for item in _items(text):
        if "[" in item:
            out.extend(_expand_item(item))
        else:
            out.append(item)
    return out


def first(text: str) -> str:
    """The first host of a node list (the rendezvous head), without expanding the rest."""
    items = _items(text)
    if not items:
        raise ValueError("empty hostlist")
    groups, _ = _groups(items[0])
    name = ""
    for prefix, body in groups:
        name += prefix + _ranges(body, items[0])[0][2]
    return name if groups else items[0]


def compress(names) -> str:
    """The shortest form scontrol writes (`scontrol show hostlist`): order kept, neighbours with
    the same prefix share one bracket, consecutive numbers of one width become `lo-hi`."""
    out: list[str] = []
    prefix: str | None = None  # of the open bracket
    ranges: list[list] = []  # [lo text, lo, hi] of the open bracket

    def close():
        if prefix is None:
            return
        parts = [lo if a == b else f"{lo}-{str(b).zfill(len(lo))}" for lo, a, b in ranges]
        if len(parts) == 1 and ranges[0][1] == ranges[0][2]:
            out.append(prefix + parts[0])
        else:
            out.append(f"{prefix}[{','.join(parts)}]")

    for name in names:
        m = _TRAILING_DIGITS.match(name)
        if m is None:
            close()
            prefix, ranges = None, []
            out.append(name)
            continue
        p, digits = m.group(1), m.group(2)
        n = int(digits)
        if p == prefix:
            last = ranges[-1]
            if n == last[2] + 1 and str(n).zfill(len(last[0])) == digits:
                last[2] = n
            else:
                ranges.append([digits, n, n])
        else:
            close()
            prefix, ranges = p, [[digits, n, n]]
    close()
    return ",".join(out)

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
    parts = text.split(",")
    if "[" not in text:
        return [p for p in parts if p]
    items: list[str] = []
    pending: str | None = None  # an item whose bracket is still open at a comma
    for p in parts:
        if pending is not None:
            pending += "," + p
            if p.rfind("]") > p.rfind("["):
                items.append(pending)
                pending = None
        elif p.rfind("[") > p.rfind("]"):
            pending = p
        elif p:
            items.append(p)
    if pending is not None:
        raise ValueError(f"invalid hostlist {text!r}: '[' is never closed")
    return items


def _ranges(body: str, item: str) -> list[tuple[int, int, int]]:
    """(lo, hi, width) for each range of one bracket body."""
    out = []
    for r in body.split(","):
        lo, dash, hi = r.partition("-")
        lo, hi = lo.strip(), hi.strip() if dash else lo.strip()
        if not (lo.isdigit() and hi.isdigit() and lo.isascii() and hi.isascii()):
            raise ValueError(f"invalid hostlist {item!r}: bad range {r!r}")
        a, b = int(lo), int(hi)
        if b < a:
            raise ValueError(f"invalid hostlist {item!r}: range {r!r} runs backwards")
        out.append((a, b, len(lo)))
    return out


def _numbers(ranges: list[tuple[int, int, int]]) -> list[str]:
    out: list[str] = []
    for a, b, w in ranges:
        if w == 1 or len(str(a)) >= w:
            out.extend(map(str, range(a, b + 1)))  # no padding to add: the common, fast case
        else:
            out.extend([str(i).zfill(w) for i in range(a, b + 1)])
    return out


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
    numbers = [_numbers(_ranges(body, item)) for _, body in groups]
    if len(groups) == 1:
        head = groups[0][0]
        return [head + n for n in numbers[0]]
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


def expand(text: str) -> list[str]:
    """Every host name of a Slurm node list, in scontrol's order (`scontrol show hostnames`)."""
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
        lo, _, width = _ranges(body, items[0])[0]
        name += prefix + str(lo).zfill(width)
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

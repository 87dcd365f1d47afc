"""Hostile inputs: the payloads the hostile-input tests try, and the count of what they tried.

Every test that feeds hpctrain a bad or hostile input calls tried(family, n); the session prints
the counts per family at its end (conftest.py) and writes them to $HPCTRAIN_HOSTILE_REPORT when
that is set, so the README's reliability section can state what the suite proves.
"""
from __future__ import annotations

import signal
from collections import Counter
from contextlib import contextmanager

COUNTS: Counter = Counter()


def tried(family: str, n: int = 1) -> None:
    COUNTS[family] += n


def canary_payloads(canary: str) -> list[str]:
    """Strings that would run a command, add a line, split a word, expand, glob or inject an
    option if any layer let them reach a shell (or a directive) unquoted. `canary` is a path
    that must still not exist afterwards."""
    return [
        f"$(touch {canary})", f"`touch {canary}`", f"; touch {canary}", f"|touch {canary}",
        f"&& touch {canary}", f"'; touch {canary}; '", f'"; touch {canary}; "',
        f"$(touch {canary})'\"`", "a'b", 'a"b', "a\\b", "${HOME}", "$HOME", "$$", "${local_rank}",
        "$local_rank", "${1}", "*", "?", "[a-z]", "~", "~root", "-rf", "--output=/tmp/x",
        "a b  c", "#SBATCH --nodes=99", "%j%A%a", "{a,b}", "!!", "\\$(id)", "x\u2028y", "é中🙂",
        "", " ", "--", "-",
    ]


# Control characters: each must be refused (exit 2), in every field but setup lines' TAB.
CONTROL = ["a\nb", "a\rb", "a\x00b", "a\x1b[31mb", "a\x7fb", "a\x85b", "a\tb", "\n#SBATCH --x"]


@contextmanager
def within(seconds: int = 10):
    """Fail (instead of hanging the suite) when the block does not finish in time."""
    def alarm(*_):
        raise AssertionError(f"did not finish within {seconds} s: a hang")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)

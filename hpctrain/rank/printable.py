"""Text from outside made safe to print: the one cleaning of everything hpctrain shows that it
did not write itself (run records, progress metric names, Slurm's node names and reasons, the
output of nvidia-smi and the other tools).

A terminal acts on what it is sent: ESC and CSI sequences (colours, cursor moves, OSC 52 that
writes the clipboard, OSC 8 links, a title), BEL, the other C0 and C1 controls, and Unicode's
bidi overrides that show text in another order than it is. Every character that is not
printable (str.isprintable: controls, format characters such as U+202E, line and paragraph
separators, unassigned code points) is shown as '?'; printable text, non-ASCII included, is
kept as it is. JSON output needs none of this: json.dumps escapes the same characters.

Standard library only: the rank side prints tool output into the job's log with it too.
"""
from __future__ import annotations


def printable(text: str) -> str:
    """`text` with each character a terminal could act on replaced by '?'."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else "?" for c in text)


def shown(text: str) -> str:
    """Lines of text for a terminal: each line printable, the line breaks kept."""
    return "\n".join(printable(line) for line in str(text).split("\n"))


def clean(value, bound: int = 200) -> str | None:
    """One untrusted value (a reason, a name) safe to show and store: printable, stripped, at
    most `bound` characters; None for nothing."""
    if value is None:
        return None
    text = printable(str(value)).strip()
    return (text[:bound - 3] + "..." if len(text) > bound else text) or None

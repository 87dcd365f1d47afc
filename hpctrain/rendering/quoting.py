"""The one place values become shell text: the Jinja filters every template uses.

Every value that reaches the shell goes through one of these — `q` (shlex.quote) and its
variants — or is a number or a name the schema held to a strict full-match pattern.
"""
from __future__ import annotations

import re
import shlex


def q(value) -> str:
    return shlex.quote(str(value))


def qjoin(values) -> str:
    return " ".join(shlex.quote(str(v)) for v in values)


_ENV_REF = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?\Z")


def qcmd(values) -> str:
    """A command (the interpreter): quoted, except a whole-word "$VAR", which the node expands
    ("python: $ISAACSIM_PYTHON_EXE" names the interpreter the cluster's environment provides)."""
    return " ".join(f'"${{{m.group(1)}}}"' if (m := _ENV_REF.match(str(v))) else shlex.quote(str(v))
                    for v in values)


_REF = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def cword(value) -> str:
    """One word of a container command (job/containers.py): `$NAME` and `${NAME}` expand on
    the node, `$$` is a '$', everything else is quoted."""
    text, out, pos = str(value), [], 0
    for m in _REF.finditer(text):
        literal = text[pos:m.start()] + ("$" if m.group() == "$$" else "")
        if literal:
            out.append(_quote_commas(literal))
        if m.group() != "$$":
            out.append(f'"${{{m.group(1) or m.group(2)}}}"')
        pos = m.end()
    if pos < len(text) or not out:
        out.append(_quote_commas(text[pos:]))
    return "".join(out)


def _quote_commas(text: str) -> str:
    # shlex leaves a ',' bare; in an array that reads like a mistaken separator (SC2054).
    quoted = shlex.quote(text)
    return f"'{text}'" if quoted == text and "," in text else quoted


def cwords(values) -> str:
    return " ".join(cword(v) for v in values)


_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def comment(value) -> str:
    """Text for a `#` comment line: control characters shown escaped, so that no value can end
    the comment and start a command or a directive (the loader refuses them too)."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


FILTERS = {"q": q, "qjoin": qjoin, "qcmd": qcmd, "comment": comment, "cwords": cwords}

"""The Jinja environment and the one call that turns a plan into script text.

Templates (templates/ in the repository, see datafiles.py): templates/parts/ are shared by every
scheduler (environment, rendezvous, launch, preemption, preflight); templates/<backend>/ holds
each scheduler's roots (job.sh.j2, array.sh.j2), which include the parts and add what only that
scheduler does. StrictUndefined: a typo in a
template is an error, never an empty string. Every value that reaches the shell goes through the
`q` filter (shlex.quote) — the one place quoting happens — or is a number or a name the schema
held to a strict pattern. Compiled templates are cached on disk (Jinja's bytecode cache).
"""
from __future__ import annotations

import re
import shlex
import jinja2

from .datafiles import data_dir, user_cache

TEMPLATES = data_dir("templates")


def _q(value) -> str:
    return shlex.quote(str(value))


def _qjoin(values) -> str:
    return " ".join(shlex.quote(str(v)) for v in values)


_ENV_REF = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?\Z")


def _qcmd(values) -> str:
    """A command (the interpreter): quoted, except a whole-word "$VAR", which the node expands
    ("python: $ISAACSIM_PYTHON_EXE" names the interpreter the cluster's environment provides)."""
    return " ".join(f'"${{{m.group(1)}}}"' if (m := _ENV_REF.match(str(v))) else shlex.quote(str(v))
                    for v in values)


_REF = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _cword(value) -> str:
    """One word of a container command (hpctrain/containers.py): `$NAME` and `${NAME}` expand on
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


def _cwords(values) -> str:
    return " ".join(_cword(v) for v in values)


_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _comment(value) -> str:
    """Text for a `#` comment line: control characters shown escaped, so that no value can end
    the comment and start a command or a directive (the loader refuses them too)."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


def _cache() -> jinja2.BytecodeCache | None:
    path = user_cache("jinja")
    return jinja2.FileSystemBytecodeCache(path) if path else None


_env: jinja2.Environment | None = None


def environment() -> jinja2.Environment:
    global _env
    if _env is None:
        _env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(TEMPLATES)),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
            trim_blocks=True,
            lstrip_blocks=True,
            autoescape=False,
            bytecode_cache=_cache(),
            # The templates do not change under a running hpctrain: without this, Jinja stats
            # every template file on every get_template, a dozen per render (the includes),
            # 1,000 renders in a sweep of 1,000.
            auto_reload=False,
        )
        _env.filters["q"] = _q
        _env.filters["qjoin"] = _qjoin
        _env.filters["qcmd"] = _qcmd
        _env.filters["comment"] = _comment
        _env.filters["cwords"] = _cwords
    return _env


def render_plan(plan, header: list[str], root: str = "job.sh.j2") -> str:
    """The script for a plan (a LaunchPlan, or an ArrayPlan with root "array.sh.j2") from its
    backend's template folder: same plan, same bytes. The header (the directive table in the
    scheduler's syntax) comes from the caller's backend: render stays below the backends, one of
    which renders parts of a script itself (submitit)."""
    return environment().get_template(f"{plan.backend}/{root}").render(plan=plan, header=header)


def render_part(plan, part: str, **values) -> str:
    """One template alone (submitit's batch prelude runs some of a job script's parts)."""
    return environment().get_template(part).render(plan=plan, **values)

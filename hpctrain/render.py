"""The Jinja environment and the one call that turns a LaunchPlan into script text.

StrictUndefined: a typo in a template is an error, never an empty string. Every value that
reaches the shell goes through the `q` filter (shlex.quote) — the one place quoting happens.
Compiled templates are cached on disk (Jinja's bytecode cache), which keeps `hpctrain render`
near the interpreter's own start-up time.
"""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import jinja2

from .plan import LaunchPlan

TEMPLATES = Path(__file__).parent / "templates"


def _q(value) -> str:
    return shlex.quote(str(value))


def _qjoin(values) -> str:
    return " ".join(shlex.quote(str(v)) for v in values)


_ENV_REF = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")


def _qcmd(values) -> str:
    """A command (the interpreter): quoted, except a whole-word "$VAR", which the node expands
    ("python: $ISAACSIM_PYTHON_EXE" names the interpreter the cluster's environment provides)."""
    return " ".join(f'"${{{m.group(1)}}}"' if (m := _ENV_REF.match(str(v))) else shlex.quote(str(v))
                    for v in values)


def _cache() -> jinja2.BytecodeCache | None:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "hpctrain", "jinja")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None  # a read-only home: render still works, only slower
    return jinja2.FileSystemBytecodeCache(path) if os.access(path, os.W_OK) else None


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
        )
        _env.filters["q"] = _q
        _env.filters["qjoin"] = _qjoin
        _env.filters["qcmd"] = _qcmd
    return _env


def render_plan(plan: LaunchPlan, template: str = "job.sh.j2") -> str:
    """The job script for a plan: same plan, same bytes."""
    return environment().get_template(template).render(plan=plan)

"""The Jinja environment and the one call that turns a plan into script text.

Templates (templates/ in the repository, see datafiles.py): templates/parts/ are shared by every
scheduler (environment, rendezvous, launch, preemption, preflight); templates/<backend>/ holds
each scheduler's roots (job.sh.j2, array.sh.j2), which include the parts and add what only that
scheduler does. StrictUndefined: a typo in a
template is an error, never an empty string. Every value that reaches the shell goes through the
`q` filter (shlex.quote) — the one place quoting happens — or is a number or a name the schema
held to a strict pattern.

A render first tries the templates precompiled to Python (precompiled.py), which needs no Jinja
import; Jinja itself renders when there are none yet (and then compiles them for the next
render), and whenever the small runtime they run on raises, so the script is Jinja's either way.
Jinja's own compiled templates are cached on disk too (its bytecode cache).
"""
from __future__ import annotations

import re
import shlex

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


FILTERS = {"q": _q, "qjoin": _qjoin, "qcmd": _qcmd, "comment": _comment, "cwords": _cwords}
# What changes the Python Jinja compiles a template to (precompiled.py keys its entries on it).
# StrictUndefined and the filters are looked up when a template runs, not compiled in.
OPTIONS = dict(keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, autoescape=False)


def _cache():
    import jinja2
    path = user_cache("jinja")
    return jinja2.FileSystemBytecodeCache(path) if path else None


_env = None


def environment():
    """Jinja's environment for the templates (imports Jinja: the precompiled path does not)."""
    global _env
    if _env is None:
        import jinja2
        _env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(TEMPLATES)),
            undefined=jinja2.StrictUndefined,
            bytecode_cache=_cache(),
            # The templates do not change under a running hpctrain: without this, Jinja stats
            # every template file on every get_template, a dozen per render (the includes),
            # 1,000 renders in a sweep of 1,000.
            auto_reload=False,
            **OPTIONS,
        )
        _env.filters.update(FILTERS)
    return _env


_store = None
_fast = None


def _precompiled():
    """The precompiled templates' store and runtime environment (None: none kept yet)."""
    global _store
    if _store is None:
        from .precompiled import Store
        _store = Store(TEMPLATES, repr(sorted(OPTIONS.items())))
        _adopt(_store)
    return _store, _fast


def _adopt(store) -> None:
    """Render from the store's code from now on, when it holds some (a sweep's later tasks too)."""
    global _fast
    if store.code is not None:
        from .template_runtime import Environment
        _fast = Environment(store.code, FILTERS)


def render_template(name: str, **values) -> str:
    """One template rendered with `values`: precompiled when kept, by Jinja otherwise."""
    store, fast = _precompiled()
    if fast is not None:
        try:
            return fast.get_template(name).render(**values)
        except Exception:  # noqa: BLE001 - what the small runtime does not do: Jinja renders
            pass
    text = environment().get_template(name).render(**values)
    if fast is None:
        store.build(environment(), lambda code: _same(code, name, values, text))
        _adopt(store)
    return text


def _same(code: dict, name: str, values: dict, text: str) -> bool:
    """Whether the runtime renders, from `code`, exactly what Jinja rendered."""
    from .template_runtime import Environment
    try:
        return Environment(code, FILTERS).get_template(name).render(**values) == text
    except Exception:  # noqa: BLE001
        return False


def render_plan(plan, header: list[str], root: str = "job.sh.j2") -> str:
    """The script for a plan (a LaunchPlan, or an ArrayPlan with root "array.sh.j2") from its
    backend's template folder: same plan, same bytes. The header (the directive table in the
    scheduler's syntax) comes from the caller's backend: render stays below the backends, one of
    which renders parts of a script itself (submitit)."""
    return render_template(f"{plan.backend}/{root}", plan=plan, header=header)


def render_part(plan, part: str, **values) -> str:
    """One template alone (submitit's batch prelude runs some of a job script's parts)."""
    return render_template(part, plan=plan, **values)

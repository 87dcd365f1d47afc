"""hpctrain's templates compiled to Python once, kept in ~/.cache/hpctrain/templates, and rendered
from there without importing Jinja (template_runtime.py): a warm `hpctrain render` then costs
what planning costs, not Jinja's import (a quarter of the whole command).

Why an entry can never be stale: it holds the SHA-256 of every template file's bytes (the very
bytes it was compiled from, read once), of the Jinja that compiled them (its location and install
time), of the environment's options, of this format and of the Python that compiled the code, and
it is used only when that digest is the one computed from the files now. Why it is right: it is
written only after the runtime rendered the script that Jinja had just rendered, byte for byte;
whatever the runtime does not do raises, and render.py then renders with Jinja; templates whose
first render the runtime could not reproduce are kept as "not precompiled" (under the same
digest), so that Jinja renders them without compiling them all again every time. A missing,
unreadable or corrupt entry, or a cache directory that cannot be written (a read-only home), only
means Jinja renders, as it always did. One entry per template folder, replaced when it changes.
"""
from __future__ import annotations

import marshal
import os
import sys

from .sha import sha256

FORMAT = b"hpctrain-precompiled-1"
_IMPORT = ("from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, "
           "TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, "
           "markup_join, missing, str_join\n")


def _sources(folder: str) -> dict[str, bytes]:
    """Every template under the folder by its Jinja name ("slurm/job.sh.j2"), as bytes."""
    out = {}
    for parent, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = os.path.relpath(parent, folder)
        for name in sorted(files):
            if name.endswith(".j2"):
                key = name if rel == "." else f"{rel.replace(os.sep, '/')}/{name}"
                with open(os.path.join(parent, name), "rb") as f:
                    out[key] = f.read()
    return out


def _jinja_id() -> bytes:
    """Which Jinja compiles (its location and install time), without importing it."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("jinja2")
        return f"{spec.origin}:{os.stat(spec.origin).st_mtime_ns}".encode()
    except (AttributeError, TypeError, ValueError, OSError):
        return b"?"


def digest(sources: dict[str, bytes], options: str) -> str:
    h = sha256(FORMAT + b"\0" + sys.version.encode() + b"\0" + _jinja_id() + b"\0"
                       + options.encode() + b"\0")
    for name, raw in sorted(sources.items()):
        h.update(f"{name}\0{len(raw)}\0".encode() + raw)
    return h.hexdigest()


def _entry(folder: str) -> str | None:
    from .datafiles import user_cache
    cache = user_cache("templates")
    if cache is None:
        return None
    key = sha256(f"{os.path.abspath(folder)}\0{sys.implementation.cache_tag}".encode(
        "utf-8", "surrogateescape")).hexdigest()[:32]
    return os.path.join(cache, f"{key}.marshal")


class Store:
    """The entry for one template folder: read once per process, written at most once."""

    def __init__(self, folder: str, options: str):
        self.folder, self.options = str(folder), options
        self.path = _entry(self.folder)
        self.code: dict | None = None  # name -> code object, when a valid entry was read
        self.tried = False  # a build was attempted in this process (at most one)
        try:
            self.sources = _sources(self.folder)
            self.digest = digest(self.sources, options)
        except OSError:
            self.sources, self.digest, self.path = {}, None, None
        self.code = self._read()

    def _read(self) -> dict | None:
        if self.path is None:
            return None
        try:
            with open(self.path, "rb") as f:
                found, code = marshal.loads(f.read())
        except (OSError, EOFError, ValueError, TypeError):
            return None
        if found != self.digest:
            return None
        if code is None:  # these templates were tried and are not kept: no build each time
            self.tried = True
        return code if isinstance(code, dict) else None

    def build(self, env, check) -> None:
        """Compile every template with Jinja's environment `env` and keep the code, if the
        runtime renders what Jinja rendered: check(code) says whether it does."""
        if self.tried or self.path is None or self.code is not None:
            return
        self.tried = True
        try:
            code = {name: compile_template(env, name, raw.decode("utf-8"),
                                           os.path.join(self.folder, name))
                    for name, raw in self.sources.items()}
        except Exception:  # noqa: BLE001 - Jinja's own error comes when the template is used
            code = None
        if code is not None and (None in code.values() or not check(code)):
            code = None
        # Kept either way: code, or None so that no later render compiles these templates again
        # to find the same (Jinja renders them, as before precompiling existed).
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(marshal.dumps((self.digest, code)))
            os.replace(tmp, self.path)  # whole or not at all, for a concurrent reader
            self.code = code
        except (OSError, ValueError):
            try:
                os.unlink(tmp)
            except OSError:
                pass


def compile_template(env, name: str, source: str, filename: str):
    """Jinja's Python for one template, importing from template_runtime instead of Jinja's
    runtime; None when the code does not start with the import line the runtime provides."""
    python = env.compile(source, name, filename, raw=True)
    if not python.startswith(_IMPORT):
        return None
    # The import line becomes an empty one: line numbers stay Jinja's.
    return compile("\n" + python[len(_IMPORT):], filename, "exec")

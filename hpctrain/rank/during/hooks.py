"""The one post-import hook of the rank side: run a callback right after a module is imported.

The CPU shims, the device pin and the collective timeout all patch a library at the moment it is
imported by the user's program — not before (the import would cost start-up time and change
import order) and not after (skrl creates its process group while being imported).
"""
from __future__ import annotations

import sys
import threading


class _AfterImport:
    """A meta-path finder that runs callbacks right after a named module has been executed.

    It never loads anything itself: it asks the other finders for the real spec and wraps that
    spec's loader's exec_module once (an instance attribute, removed at the first call), so the
    module keeps its normal loader, __spec__ and __file__.
    """

    def __init__(self) -> None:
        self.hooks: dict[str, list] = {}
        self.lock = threading.RLock()

    def find_spec(self, fullname, path=None, target=None):
        with self.lock:
            if fullname not in self.hooks:
                return None
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module):
            try:
                del loader.exec_module  # one shot: the class's own method again
            except AttributeError:
                pass
            original(module)
            if getattr(module, "__name__", None) == fullname:
                with self.lock:
                    hooks = self.hooks.pop(fullname, [])
                for fn in hooks:
                    _call_hook(fullname, fn, module)

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):  # a loader without an instance dict: no hook
            pass
        return spec


def _call_hook(name: str, fn, module) -> None:
    # A hook that no longer fits a library release must not break the user's import: say so
    # loudly and let the library run as it would without it.
    try:
        fn(module)
    except Exception as exc:  # noqa: BLE001
        print(f"hpctrain: warning: post-import hook for {name} failed: {exc!r}", file=sys.stderr,
              flush=True)


_FINDER = _AfterImport()


def after_import(name: str, fn) -> None:
    """Run fn(module) once `name` is imported (at once if it already is)."""
    with _FINDER.lock:
        module = sys.modules.get(name)
        if module is None:
            _FINDER.hooks.setdefault(name, []).append(fn)
            if _FINDER not in sys.meta_path:
                sys.meta_path.insert(0, _FINDER)
            return
    _call_hook(name, fn, module)


def follow_reexports(package: str, module, before: dict) -> None:
    """After a hook replaced functions of `module`: where `package` re-exported them (`from .x
    import *`, already run), point those names at the replacements too. `before` maps each name
    to the object it replaced."""
    pkg = sys.modules.get(package)
    for name, old in before.items():
        if pkg is not None and old is not None and getattr(pkg, name, None) is old:
            setattr(pkg, name, getattr(module, name))

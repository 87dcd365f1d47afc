"""One adapter per RL library: what each needs to go distributed, in one place.

An adapter answers: what program every rank runs (script + arguments), which extra environment
it needs, which launcher starts the ranks, and which traps to warn about. Nothing else in hpctrain
knows a library by name.
"""
from __future__ import annotations

from importlib import import_module

from .base import Adapter

_MODULES = {
    "command": "command",
    "rl_games": "rl_games",
    "rsl_rl": "rsl_rl",
    "skrl": "skrl",
    "skrl_jax": "skrl_jax",
    "di_engine": "di_engine",
}


def adapter(library: str) -> Adapter:
    """The adapter for a library name (validated earlier by the schema)."""
    module = import_module(f".{_MODULES[library]}", __name__)
    return module.ADAPTER


__all__ = ["Adapter", "adapter"]

"""One adapter per RL library: what each needs to go distributed, in one place.

An adapter answers: what program every rank runs (script + arguments), which extra environment
it needs, which launcher starts the ranks, which CPU shims run it without a GPU, where it writes
checkpoints and how it resumes, and which traps to refuse or warn about. Nothing else in hpctrain
knows a library by name: LIBRARIES below is the only list of them (the job schema checks
`library:` against it). Adding a library is one module here with an ADAPTER, plus its tests.
"""
from __future__ import annotations

from importlib import import_module

from .base import Adapter

LIBRARIES = ("command", "rl_games", "rsl_rl", "skrl", "skrl_jax", "di_engine")


def adapter(library: str) -> Adapter:
    """The adapter for a library name (checked against LIBRARIES when the job loaded)."""
    if library not in LIBRARIES:
        raise KeyError(library)
    return import_module(f".{library}", __name__).ADAPTER


__all__ = ["Adapter", "LIBRARIES", "adapter"]

"""Where the job-script templates and the packaged site profiles are.

In the repository they lie beside the package, in templates/ and site_configs/; pyproject.toml
maps them into the package as hpctrain/templates and hpctrain/site_configs, so that a wheel or
an editable install finds them as package data. A source checkout used without installing finds
them beside the package.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path


def data_dir(name: str) -> Path:
    """templates or site_configs: the directory hpctrain reads them from."""
    spec = importlib.util.find_spec(f"hpctrain.{name}")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parent.parent / name

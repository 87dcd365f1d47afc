"""Where site profiles are found (on $HPCTRAIN_SITE_PATH, the user's config, the packaged ones)
and read into the schema's type. job/sites.py adds the checks that need the backends; a backend
that must hold a run's record to the user's own profile (backends/slurm/rest.py) reads it here,
by name, through the same lookup as --site."""
from __future__ import annotations

import functools
import os
from pathlib import Path

from ..datafiles import data_dir
from ..errors import HpctrainError, did_you_mean
from .spec import SiteProfile, convert_site
from .yamlfile import Located, load_file

PACKAGED = data_dir("site_configs")


def search_dirs() -> list[Path]:
    """Where site profiles are looked up, first match wins."""
    dirs = [Path(p) for p in os.environ.get("HPCTRAIN_SITE_PATH", "").split(os.pathsep) if p]
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    dirs.append(config_home / "hpctrain" / "sites")
    dirs.append(PACKAGED)
    return dirs


def available() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for d in search_dirs():
        if d.is_dir():
            for f in sorted(d.glob("*.yaml")):
                found.setdefault(f.stem, f)
    return found


def find(name: str) -> Path:
    if name.endswith((".yaml", ".yml")) or os.sep in name:
        path = Path(name)
        if not path.is_file():
            raise HpctrainError(f"site profile file not found: {name}", fix="check the path")
        return path
    return named(name)


def named(name: str) -> Path:
    """The profile a plain site name finds on the search path (never a path: a name read from a
    run directory must not choose the file)."""
    for d in search_dirs():
        path = d / f"{name}.yaml"
        if path.is_file():
            return path
    sites = available()
    raise HpctrainError(
        f"unknown site '{name}'",
        fix=did_you_mean(name, sites) + "; or add sites/" + name + ".yaml under "
        + str(search_dirs()[-2]) + " or a directory on $HPCTRAIN_SITE_PATH")


def read(path: Path) -> tuple[SiteProfile, Located]:
    """The profile at `path`, converted to the schema's type (not yet checked against the
    backends: job/sites.load does that)."""
    return _read(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _read(path: str, mtime_ns: int) -> tuple[SiteProfile, Located]:
    # A sweep loads every variant against the same site, `status` asks for every run: parse a
    # profile once (keyed on the file's mtime, so an edited profile is read again in a
    # long-lived notebook kernel).
    doc = load_file(path)
    return convert_site(doc), doc

"""Loading site profiles: found and read by schema/profiles.py (packaged, per-user, on
$HPCTRAIN_SITE_PATH, or by path), then checked as a whole here."""
from __future__ import annotations

import functools
from pathlib import Path

from .checks import check_site
from ..schema.profiles import PACKAGED, available, find, read, search_dirs
from ..schema.spec import SiteProfile
from ..schema.yamlfile import Located

__all__ = ["PACKAGED", "available", "find", "load", "load_file", "search_dirs"]


def load(name: str) -> tuple[SiteProfile, Located]:
    """The site profile `name` (a name on the search path, or a file's path), checked whole."""
    return load_file(find(name))


def load_file(path: Path) -> tuple[SiteProfile, Located]:
    """The site profile in this file, checked whole; read again only once the file changes."""
    return _load(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _load(path: str, mtime_ns: int) -> tuple[SiteProfile, Located]:
    site, doc = read(Path(path))
    check_site(site, doc)
    return site, doc

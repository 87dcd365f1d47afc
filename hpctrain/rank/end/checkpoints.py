"""Which checkpoint a run resumes from: the newest one its library's patterns match."""
from __future__ import annotations

import glob
import os
import re

_SKIP = re.compile(r"(^\.|\.(tmp|part|partial)$)")


def being_written(name: str) -> bool:
    """A file name a checkpoint has while it is written (hidden, *.tmp, *.part, *.partial):
    never taken as a checkpoint."""
    return bool(_SKIP.search(name))


def _natural(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def find_checkpoint(run_dir: str, patterns: list[str]) -> str | None:
    """The newest checkpoint matching `patterns` (relative to run_dir), or None."""
    found = set()
    for pattern in patterns:
        full = pattern if os.path.isabs(pattern) else os.path.join(run_dir, pattern)
        found.update(glob.glob(full, recursive=True))
    best, best_key = None, None
    for path in found:
        if being_written(os.path.basename(path)):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue  # removed since the glob (a rotated checkpoint)
        if os.path.isfile(path) and st.st_size == 0:
            continue
        key = (st.st_mtime_ns, _natural(os.path.basename(path)))
        if best_key is None or key > best_key:
            best, best_key = path, key
    return os.path.abspath(best) if best else None

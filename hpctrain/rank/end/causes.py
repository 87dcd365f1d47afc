"""A rank's crash in one line a user can act on, where the cause is known; else the exception.

The line is what status/rank-R.failed.json records and the job's log prints after
"failed: rank R on NODE": for a known cause it names what is missing and the setting that fixes
it, instead of the last line of a traceback three frames deep in a library.
"""
from __future__ import annotations

import re

# Isaac Lab's retrieve_file_path: "Unable to resolve the file: PATH" (a local asset root) or
# "Unable to find the file: URL" (its public asset server, after its retries).
_ISAAC_ASSET = re.compile(r"Unable to (?:resolve|find) the file: (\S+)")


def explain(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    m = _ISAAC_ASSET.search(str(exc)) if isinstance(exc, FileNotFoundError) else None
    if m and "/Isaac/" in m.group(1):
        where = ("its public asset server, which this node cannot reach"
                 if "://" in m.group(1) else "the asset root (ISAACSIM_ASSET_ROOT)")
        return (f"Isaac Lab could not load the asset {m.group(1)} from {where}: set isaaclab_assets "
                "(job or site) to an Isaac asset root on storage the nodes read, holding that "
                "file; `hpctrain doctor` checks it from a compute node")
    return text

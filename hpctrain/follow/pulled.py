"""The laptop's side of `hpctrain pull`: the names it accepts, the folder it writes and the
manifest it leaves there (hpctrain-pull.json: each file's path, size and sha256).

Everything here is untrusted: the names come from a listing of a run directory that anyone who
can write it shaped, and the manifest from a folder anyone may have edited since. So a name is
a strict pattern (no '..', no leading '.' or '-', no space, quote or control character) before
it reaches rsync or this file system; the manifest is read bounded and checked entry by entry;
and every file here is opened, hashed or refused without following a link (runs/tree.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import NamedTuple

from ..errors import HpctrainError
from ..rank.records import NotRegular, open_dir, under_root
from ..runs import tree
from ..runs.untrusted import MAX_FILES, Unreadable, excerpt

MANIFEST = "hpctrain-pull.json"
# Where rsync keeps a cut file until it is whole (inside each folder it writes): a killed pull
# leaves it there and the next one resumes from it; the file's own name appears only once whole.
PARTIAL = ".hpctrain-partial"
MAX_MANIFEST = 32 << 20  # 100,000 entries of ~250 bytes: far above a run's artifacts
MAX_PATH = 1024
MAX_PARTS = 32
_PART = r"[A-Za-z0-9_][A-Za-z0-9_.+=,@-]{0,254}"
NAME = re.compile(rf"{_PART}(?:/{_PART}){{0,{MAX_PARTS - 1}}}")
SHA256 = re.compile(r"[0-9a-f]{64}")


def good_name(rel: str) -> bool:
    """A relative path hpctrain copies: every part of it a plain name (never '.', '..', a
    hidden name or an option), at most MAX_PATH characters."""
    return len(rel) <= MAX_PATH and NAME.fullmatch(rel) is not None \
        and ".." not in rel.split("/")


class Entry(NamedTuple):
    path: str
    size: int
    sha256: str


def sha256_of(dest: Path, rel: str) -> tuple[str, os.stat_result]:
    """The sha256 of dest/rel and its stat, opened without following a link anywhere below
    dest (NotRegular for a link or anything but a regular file)."""
    fd = tree.open_file(dest / rel, dest)
    try:
        st = os.fstat(fd)
        h = hashlib.sha256()
        with os.fdopen(fd, "rb", closefd=False) as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        return h.hexdigest(), st
    finally:
        os.close(fd)


def local_state(dest: Path, rel: str) -> os.stat_result | None:
    """What is at dest/rel now (lstat, no link followed on the way): None when nothing is.
    HpctrainError when a folder on the way is a link or not a folder."""
    try:
        top, parts, name = under_root(str(dest / rel), str(dest))
    except NotRegular as exc:
        raise HpctrainError(str(exc)) from None
    try:
        fd = open_dir(top, parts, create=False)
    except FileNotFoundError:
        return None
    except NotRegular as exc:
        raise HpctrainError(f"cannot pull into {dest}: {exc.strerror}",
                            fix="remove that link (hpctrain never writes through one), or "
                            "give another folder with --to") from None
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    finally:
        os.close(fd)


def check_target(dest: Path, rel: str) -> os.stat_result | None:
    """local_state, refusing a link or a special file where a pulled file would go."""
    st = local_state(dest, rel)
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        raise HpctrainError(f"{dest / rel} is {kind}: pull writes only regular files and never "
                            "through a link", fix=f"remove it, or give another folder with --to")
    return st


# ----------------------------------------------------------------------------- the manifest

def read_manifest(dest: Path) -> dict[str, Entry]:
    """The files a previous pull wrote into dest, by path: {} when there is no manifest.
    HpctrainError naming the file and the fault when it is not one hpctrain wrote."""
    path = dest / MANIFEST
    st = local_state(dest, MANIFEST)
    if st is None:
        return {}
    fix = f"remove {path} (hpctrain writes it; the next pull then treats every file there as yours)"
    if not stat.S_ISREG(st.st_mode):
        raise HpctrainError(f"{path} is not a regular file", fix=fix)
    try:
        with os.fdopen(tree.open_file(path, dest), "rb") as f:
            data = f.read(MAX_MANIFEST + 1)
        if len(data) > MAX_MANIFEST:
            raise Unreadable(0, f"larger than {MAX_MANIFEST >> 20} MiB")
        doc = json.loads(data.decode("utf-8"))
    except (Unreadable, NotRegular) as exc:
        raise HpctrainError(f"{path}: {exc.strerror}", fix=fix) from None
    except (ValueError, RecursionError):
        raise HpctrainError(f"{path} is not a manifest hpctrain wrote (not JSON)", fix=fix) from None
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, list) or len(files) > MAX_FILES:
        raise HpctrainError(f"{path} has no list of at most {MAX_FILES} 'files'", fix=fix)
    out: dict[str, Entry] = {}
    for i, item in enumerate(files):
        ok = (isinstance(item, dict) and isinstance(item.get("path"), str)
              and good_name(item["path"]) and type(item.get("size")) is int
              and 0 <= item["size"] < 1 << 50 and isinstance(item.get("sha256"), str)
              and SHA256.fullmatch(item["sha256"]))
        if not ok:
            shown = excerpt(str(item.get("path", "")) if isinstance(item, dict) else str(item))
            raise HpctrainError(f"{path}: files[{i}] ({shown}) is not a path, size and sha256 "
                                "hpctrain wrote", fix=fix)
        out[item["path"]] = Entry(item["path"], item["size"], item["sha256"])
    return out


def write_manifest(dest: Path, source: dict, entries: dict[str, Entry]) -> None:
    doc = {"pulled_by": "hpctrain", **source,
           "files": [e._asdict() for e in sorted(entries.values())]}
    from ..runs.untrusted import writing
    with writing(dest / MANIFEST, dest) as f:
        f.write((json.dumps(doc, indent=1) + "\n").encode())

"""Directories under a run directory made, listed, copied, renamed and removed without following
a link: the counterpart, for folders, of rank/records.replacing and open_append (files).

A study's workers write into their run directory for days (trials/<n>/, a population's
checkpoint slots), and anyone who can write there can plant a symbolic link as a trial folder
or a slot: a path-based mkdir, copytree or rmtree would then write the trial's files into, or
delete the folders of, whatever the link points at. Here every directory below `root` (the run
directory, the caller's own path) is entered with O_NOFOLLOW, one directory fd to the next
(rank/records.open_dir), and a link found where a directory should be is refused (NotRegular);
a removal removes a link itself, never what it points at. Errors are OSErrors (NotRegular for
a refusal): a worker fails the one trial or copy, a command reports it.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..rank.records import NotRegular, open_dir, under_root, what_it_is

MAX_DEPTH = 64  # folders within folders a removal descends: hpctrain's own trees are shallow
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _split(path, root) -> tuple[str, list[str], str]:
    return under_root(str(path), None if root is None else str(root))


def make_dirs(path, root) -> None:
    """`path` and every directory between `root` and it, made where missing or entered, none
    through a link (NotRegular)."""
    top, parts, name = _split(path, root)
    os.close(open_dir(top, [*parts, name]))


def entries(path, root) -> list[tuple[str, os.stat_result]]:
    """The names in directory `path` with what each is (lstat: a link is a link); [] when the
    directory is missing. The directory is entered without following a link (NotRegular)."""
    top, parts, name = _split(path, root)
    try:
        fd = open_dir(top, [*parts, name], create=False)
    except FileNotFoundError:
        return []
    try:
        out = []
        with os.scandir(fd) as it:
            for entry in it:
                try:
                    out.append((entry.name, entry.stat(follow_symlinks=False)))
                except FileNotFoundError:
                    continue
        return out
    finally:
        os.close(fd)


def touch(path, root) -> None:
    """Set `path`'s times to now: the link itself if it is one, never what it points at."""
    top, parts, name = _split(path, root)
    fd = open_dir(top, parts, create=False)
    try:
        os.utime(name, dir_fd=fd, follow_symlinks=False)
    finally:
        os.close(fd)


def open_file(path, root) -> int:
    """A read-only fd on the regular file `path` (a link, a pipe or a device refused, the
    directories on the way entered without following a link). The caller closes it."""
    top, parts, name = _split(path, root)
    dfd = open_dir(top, parts, create=False)
    try:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                         | getattr(os, "O_NOCTTY", 0), dir_fd=dfd)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise NotRegular(0, f"{path} is a symbolic link, not a regular file: hpctrain does "
                                "not read through it") from None
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegular(0, f"{path} is {what_it_is(st.st_mode)}, not a regular file")
    os.set_blocking(fd, True)
    return fd


def remove(path, root) -> None:
    """Remove what is at `path`: a file, or a link itself (never its target), or a directory
    with everything in it, each folder entered without following a link. Nothing when missing;
    NotRegular when a directory on the way to `path` is a link."""
    top, parts, name = _split(path, root)
    try:
        fd = open_dir(top, parts, create=False)
    except FileNotFoundError:
        return
    try:
        _remove_at(fd, name, str(path), 0)
    finally:
        os.close(fd)


def _remove_at(dfd: int, name: str, shown: str, depth: int) -> None:
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dfd)
        return
    if depth >= MAX_DEPTH:
        raise NotRegular(0, f"{shown} holds folders more than {MAX_DEPTH} deep: not removed")
    try:
        sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        os.unlink(name, dir_fd=dfd)  # made a link since it was looked at: the link goes
        return
    try:
        with os.scandir(sub) as it:
            names = [e.name for e in it]
        for child in names:
            _remove_at(sub, child, os.path.join(shown, child), depth + 1)
    finally:
        os.close(sub)
    os.rmdir(name, dir_fd=dfd)


def rename(src, dst, root) -> None:
    """Put `src` in `dst`'s place (os.replace), both below `root`: neither followed if it is a
    link, nor any directory on the way to them."""
    stop, sparts, sname = _split(src, root)
    dtop, dparts, dname = _split(dst, root)
    sfd = open_dir(stop, sparts, create=False)
    try:
        dfd = open_dir(dtop, dparts, create=False)
        try:
            os.replace(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)


def copy_tree(src, dst, root, skip=("__pycache__",), skip_suffix=(".pyc",)) -> None:
    """Copy hpctrain's own tree `src` (trusted: its links are not followed, only its folders and
    regular files are copied) into `dst`, a directory that must not exist yet below `root`;
    every folder and file made new there (O_EXCL, O_NOFOLLOW), so nothing planted in advance is
    written through."""
    top, parts, name = _split(dst, root)
    dfd = open_dir(top, parts)
    try:
        os.mkdir(name, dir_fd=dfd)
        into = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    finally:
        os.close(dfd)
    try:
        _copy_into(Path(src), into, skip, skip_suffix)
    finally:
        os.close(into)


def _copy_into(src: Path, into: int, skip, skip_suffix) -> None:
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        if entry.name in skip or entry.name.endswith(skip_suffix):
            continue
        if entry.is_dir(follow_symlinks=False):
            os.mkdir(entry.name, dir_fd=into)
            sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=into)
            try:
                _copy_into(Path(entry.path), sub, skip, skip_suffix)
            finally:
                os.close(sub)
        elif entry.is_file(follow_symlinks=False):
            mode = entry.stat(follow_symlinks=False).st_mode & 0o777
            out = os.open(entry.name, _NEW_FILE, mode, dir_fd=into)
            with open(entry.path, "rb") as reader, os.fdopen(out, "wb") as writer:
                while chunk := reader.read(1 << 20):
                    writer.write(chunk)

"""YAML loading that remembers the line of every key, so errors can say file:line — and that no
file can turn against its reader.

Job files and site profiles are shared between people and on cluster file systems, so they are
read as untrusted: the text must be UTF-8 and at most MAX_BYTES; aliases (`*name`) are refused
(one anchor used many times is how a few hundred bytes of YAML become gigabytes); nesting is
bounded (MAX_DEPTH); a key given twice in one mapping is an error naming both lines (the last
one would otherwise win in silence). The checks run on the parser's event stream, before any
document is built, so a hostile file costs no more than reading it.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import HpctrainError

KeyPath = tuple  # ("resources", "nodes") or ("args", 0)
MAX_BYTES = 1 << 20  # a job file or site profile; the largest real ones are a few KiB
MAX_DEPTH = 32


class Located(dict):
    """A loaded document: the data, plus the file and the line where each key path starts."""

    def __init__(self, data: dict, source: str, lines: dict[KeyPath, int],
                 raw: dict[KeyPath, str] | None = None):
        super().__init__(data)
        self.source = source
        self.lines = lines
        # The text as written of each unquoted value that YAML read as a number, a boolean or
        # null: sbatch_options refuses one that YAML 1.1 changed (`on` -> true, `010` -> 8).
        self.raw = raw or {}

    def has(self, path: KeyPath) -> bool:
        return tuple(path) in self.lines

    def where(self, path: KeyPath) -> str:
        """'file:line' for the longest prefix of path that has a known line."""
        path = tuple(path)
        while path and path not in self.lines:
            path = path[:-1]
        line = self.lines.get(path)
        return f"{self.source}:{line}" if line else self.source


def _yaml():
    """PyYAML and its loader."""
    import yaml
    # The C loader is 5-10x faster where libyaml is present; the pure one behaves the same.
    return yaml, getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _check_events(text: str, source: str) -> None:
    """Aliases and depth, on the event stream: nothing is expanded or built yet."""
    yaml, _Loader = _yaml()
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.AliasEvent):
                raise HpctrainError(
                    f"YAML aliases are not accepted (*{event.anchor})",
                    f"{source}:{event.start_mark.line + 1}",
                    "write the value out where it is used; anchors (&name) and aliases "
                    "(*name) would let a small file expand without bound")
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise _too_deep(source, event.start_mark.line + 1)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.MarkedYAMLError as exc:
        if "nesting depth" in str(exc.problem):
            # libyaml (PyYAML >= 6.0.3's C parser) stops very deep nesting itself, before the
            # events reach the count above: the same error, whatever the PyYAML release.
            raise _too_deep(source, exc.problem_mark.line + 1 if exc.problem_mark else None) from None
        raise _invalid(exc, source) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, ...)
        line = text[:exc.position].count("\n") + 1
        raise HpctrainError(f"this is not valid YAML: character {exc.character!r} is not "
                            "allowed", f"{source}:{line}", "remove it (control characters "
                            "are never part of a job)") from None
    except yaml.YAMLError as exc:
        raise HpctrainError(f"this is not valid YAML: {exc}", source) from None


def _too_deep(source: str, line: int | None) -> HpctrainError:
    return HpctrainError(f"nested deeper than {MAX_DEPTH} levels",
                         f"{source}:{line}" if line else source,
                         "a job file is a few levels deep: check the indentation")


def _invalid(exc, source: str) -> HpctrainError:
    mark = exc.problem_mark or exc.context_mark
    where = f"{source}:{mark.line + 1}" if mark else source
    return HpctrainError(f"this is not valid YAML: {exc.problem or exc.context}", where,
                         "check the indentation and quoting around that line")


_STR_TAG = "tag:yaml.org,2002:str"


def _collect_lines(root, source: str, raw: dict[KeyPath, str] | None = None) -> dict[KeyPath, int]:
    """The line of every key path, refusing a key given twice in one mapping, and an unquoted
    value that YAML 1.1 reads as a base-60 number (`30:00` -> 1800). Iterative: the depth is
    bounded already, but no recursion is needed either. raw: filled with the text of each
    unquoted non-string value, by key path."""
    yaml, _ = _yaml()
    lines: dict[KeyPath, int] = {}
    stack = [(root, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, yaml.ScalarNode) and not node.style and node.tag != _STR_TAG \
                and path:
            if ":" in node.value and node.tag.endswith((":int", ":float")):
                shown = ".".join(map(str, path))
                raise HpctrainError(
                    f"'{shown}' is {node.value} unquoted, which YAML reads as the base-60 number "
                    f"{yaml.safe_load(node.value)} (YAML 1.1), not the text you wrote",
                    f"{source}:{node.start_mark.line + 1}",
                    "quote it: " + (f"{path[-1]}: " if isinstance(path[-1], str) else "")
                    + f"\"{node.value}\"")
            if raw is not None:
                raw[path] = node.value
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key, value in node.value:
                name = key.value
                if name in seen:
                    shown = ".".join(map(str, path + (name,)))
                    raise HpctrainError(
                        f"'{shown}' is given twice, at lines {seen[name]} and "
                        f"{key.start_mark.line + 1}", f"{source}:{key.start_mark.line + 1}",
                        "keep one of them: YAML would silently use the last")
                seen[name] = key.start_mark.line + 1
                sub = path + (name,)
                lines[sub] = key.start_mark.line + 1
                stack.append((value, sub))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                sub = path + (i,)
                lines[sub] = item.start_mark.line + 1
                stack.append((item, sub))
    return lines


def load_text(text: str, source: str) -> Located:
    _check_events(text, source)
    yaml, _Loader = _yaml()
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else {}
    except yaml.MarkedYAMLError as exc:
        raise _invalid(exc, source) from None
    except yaml.YAMLError as exc:
        raise HpctrainError(f"this is not valid YAML: {exc}", source) from None
    finally:
        loader.dispose()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise HpctrainError(
            f"the file must hold a mapping of keys, not a {type(data).__name__}", source,
            "start the file with 'name: …' and the other keys at the left margin")
    raw: dict[KeyPath, str] = {}
    lines = _collect_lines(node, source, raw) if node is not None else {}
    return Located(data, source, lines, raw)


def load_file(path: str | Path) -> Located:
    path = Path(path)
    try:
        # Without waiting for a writer, and a regular file only: a named pipe or a device named
        # as a job file or site profile must not hang (nor /dev/zero fill memory).
        import stat
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError
            if not stat.S_ISREG(mode):
                raise HpctrainError(f"{path} is not a regular file (a named pipe, device or "
                                    "socket)", fix="give the path of a YAML file")
            os.set_blocking(fd, True)
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise HpctrainError(f"no such file: {path}", fix="check the path") from None
    except IsADirectoryError:
        raise HpctrainError(f"{path} is a directory, not a YAML file", fix="give the file's path") from None
    except OSError as exc:
        raise HpctrainError(f"cannot read {path}: {exc.strerror}", fix="check the path and its "
                            "permissions") from None
    if len(raw) > MAX_BYTES:
        raise HpctrainError(f"{path} is larger than {MAX_BYTES >> 20} MiB: not a job file or "
                            "site profile", fix="check the path")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise HpctrainError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x})", f"{path}:{line}",
                            "save the file as UTF-8") from None
    return load_text(text, str(path))


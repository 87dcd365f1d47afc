"""YAML loading that remembers the line of every key, so errors can say file:line."""
from __future__ import annotations

from pathlib import Path

import yaml

from .errors import HpctrainError

# The C loader is 5-10x faster where libyaml is present; the pure one behaves the same.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

KeyPath = tuple  # ("resources", "nodes") or ("args", 0)


class Located(dict):
    """A loaded document: the data, plus the file and the line where each key path starts."""

    def __init__(self, data: dict, source: str, lines: dict[KeyPath, int]):
        super().__init__(data)
        self.source = source
        self.lines = lines

    def has(self, path: KeyPath) -> bool:
        return tuple(path) in self.lines

    def where(self, path: KeyPath) -> str:
        """'file:line' for the longest prefix of path that has a known line."""
        path = tuple(path)
        while path and path not in self.lines:
            path = path[:-1]
        line = self.lines.get(path)
        return f"{self.source}:{line}" if line else self.source


def _collect_lines(node, path: KeyPath, lines: dict) -> None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub = path + (key.value,)
            lines[sub] = key.start_mark.line + 1
            _collect_lines(value, sub, lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            sub = path + (i,)
            lines[sub] = item.start_mark.line + 1
            _collect_lines(item, sub, lines)


def load_text(text: str, source: str) -> Located:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else {}
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}" if mark else source
        raise HpctrainError(
            f"this is not valid YAML: {exc.problem or exc.context}",
            where,
            "check the indentation and quoting around that line",
        ) from None
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
    lines: dict[KeyPath, int] = {}
    _collect_lines(node, (), lines)
    return Located(data, source, lines)


def load_file(path: str | Path) -> Located:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise HpctrainError(f"no such file: {path}", fix="check the path") from None
    except OSError as exc:
        raise HpctrainError(f"cannot read {path}: {exc.strerror}") from None
    return load_text(text, str(path))

"""YAML loading that remembers where every value came from, for errors that name a line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import SourceError

Loc = tuple[str | int, ...]


@dataclass
class YamlDocument:
    path: str
    data: Any
    lines: dict[Loc, int]  # location (keys and indexes) -> 1-based line

    def line_of(self, loc: Loc) -> int | None:
        """Line of ``loc``, or of its nearest enclosing value that has one."""
        loc = tuple(loc)
        while loc:
            if loc in self.lines:
                return self.lines[loc]
            loc = loc[:-1]
        return self.lines.get((), 1)

    def error(self, loc: Loc, message: str) -> SourceError:
        return SourceError(self.path, self.line_of(loc), format_loc(loc) or None, message)


def format_loc(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _walk(node: yaml.Node, loc: Loc, lines: dict[Loc, int], path: str) -> None:
    lines[loc] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                raise SourceError(path, key_node.start_mark.line + 1, format_loc(loc + (key,)), "duplicate key")
            seen.add(key)
            _walk(value_node, loc + (key,), lines, path)
            # A key's own line is the better pointer for errors about that key.
            lines[loc + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, loc + (index,), lines, path)


def load_yaml(path: Path | str, text: str | None = None) -> YamlDocument:
    """Parse ``path`` (or ``text`` named as ``path``); syntax errors become SourceError."""
    name = str(path)
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SourceError(name, None, None, "file not found") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise SourceError(name, None, None, f"cannot read: {exc}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        raise SourceError(name, line, None, f"YAML syntax error: {problem}") from None
    except yaml.YAMLError as exc:
        raise SourceError(name, None, None, f"YAML error: {exc}") from None
    lines: dict[Loc, int] = {}
    if node is not None:
        _walk(node, (), lines, name)
    return YamlDocument(name, data, lines)

"""YAML loading that remembers where every value came from, for errors that name a line.

A sweep file may come from anyone, so loading is bounded: the file's size, how deeply its
values nest (the composer recurses, and a RecursionError is no message), and how many values
it holds once aliases are expanded (a "billion laughs" file is a few lines whose aliases
multiply into billions of values). Each is refused with the line where it happens, before
anything walks the expanded tree. A NUL character in a value is refused too: the database
(PostgreSQL text) and the shell (bash drops it) cannot carry it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import SourceError

Loc = tuple[str | int, ...]

MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 50
# Values (mappings, lists and scalars) once every alias is expanded: real sweeps hold hundreds.
MAX_VALUES = 100_000


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
            if not isinstance(key, str):
                raise SourceError(path, key_node.start_mark.line + 1, format_loc(loc) or None,
                                  "expected a plain key (a name), got a list or mapping as a key")
            if key in seen:
                raise SourceError(path, key_node.start_mark.line + 1, format_loc(loc + (key,)), "duplicate key")
            seen.add(key)
            _walk(value_node, loc + (key,), lines, path)
            # A key's own line is the better pointer for errors about that key.
            lines[loc + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, loc + (index,), lines, path)
    elif "\x00" in node.value:
        raise SourceError(path, node.start_mark.line + 1, format_loc(loc) or None,
                          "a NUL character (\\0) cannot be part of a value")


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with a bound on nesting while it composes."""

    depth = 0

    def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
        if self.check_event(yaml.AliasEvent):
            return super().compose_node(parent, index)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise _Refused(mark.line + 1, f"values nest more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


class _Refused(Exception):
    def __init__(self, line: int | None, message: str) -> None:
        super().__init__(message)
        self.line, self.message = line, message


def _expanded_size(root: yaml.Node) -> None:
    """Count the values of the tree with aliases expanded (each distinct node once, by memo:
    aliases share node objects); refuse past MAX_VALUES and refuse an alias inside itself."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_nodes: set[int] = set()
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes and not children_done:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        if not children_done:
            if key in open_nodes:
                raise _Refused(node.start_mark.line + 1, "an alias refers to a value that contains it")
            open_nodes.add(key)
            stack.append((node, True))
            for child in children:
                if id(child) in open_nodes:
                    raise _Refused(child.start_mark.line + 1, "an alias refers to a value that contains it")
                if id(child) not in sizes:
                    stack.append((child, False))
            continue
        open_nodes.discard(key)
        size = 1 + sum(sizes[id(child)] for child in children)
        if size > MAX_VALUES:
            raise _Refused(node.start_mark.line + 1, f"more than {MAX_VALUES:,} values once its aliases are "
                                                     "expanded (a YAML alias bomb?)")
        sizes[key] = size


def load_yaml(path: Path | str, text: str | None = None) -> YamlDocument:
    """Parse ``path`` (or ``text`` named as ``path``); syntax errors become SourceError."""
    name = str(path)
    if text is None:
        try:
            with open(path, "rb") as handle:
                raw = handle.read(MAX_FILE_BYTES + 1)
            text = raw.decode("utf-8")
        except FileNotFoundError:
            raise SourceError(name, None, None, "file not found") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise SourceError(name, None, None, f"cannot read: {exc}") from None
    if len(text) > MAX_FILE_BYTES:
        raise SourceError(name, None, None, f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB: not a sweep file")
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _expanded_size(node)
        data = loader.construct_document(node) if node is not None else None
    except _Refused as exc:
        raise SourceError(name, exc.line, None, exc.message) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        raise SourceError(name, line, None, f"YAML syntax error: {problem}") from None
    except yaml.YAMLError as exc:
        raise SourceError(name, None, None, f"YAML error: {exc}") from None
    except (ValueError, OverflowError) as exc:  # a scalar the constructor cannot make (e.g. a huge float)
        raise SourceError(name, None, None, f"YAML value error: {exc}") from None
    finally:
        loader.dispose()
    lines: dict[Loc, int] = {}
    if node is not None:
        _walk(node, (), lines, name)
    return YamlDocument(name, data, lines)

"""YAML loading that remembers where every value came from, for errors that name a line.

A sweep file may come from anyone, so loading is bounded: the file's size, how deeply its
values nest (the composer recurses, and a RecursionError is no message), and how many values
it holds once aliases are expanded (a "billion laughs" file is a few lines whose aliases
multiply into billions of values). Each is refused with the line where it happens, before
anything walks the expanded tree. A NUL character in a value is refused too: the database
(PostgreSQL text) and the shell (bash drops it) cannot carry it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import SourceError
from orchestrator.safefile import RefusedFile, read_regular

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


def data_loc(data: Any, loc: Loc, kind: str = "") -> tuple[Loc, str | None]:
    """A validator's error location as a path into the data a person wrote, and a note on a key.

    pydantic puts its own steps in a location: the member of a union it tried (``walltime.str``),
    a validator's name, and ``[key]`` for a mapping's key. Each part is kept only while it leads
    somewhere in ``data`` (and a missing field's name, for a ``kind`` "missing" error); a bad
    mapping key (``env`` with a null key) becomes a note naming it."""
    out: list[str | int] = []
    node = data
    parts = list(loc)
    for index, part in enumerate(parts):
        if isinstance(node, dict):
            key = part if part in node else next((k for k in node if str(k) == str(part)), _MISSING)
            if key is _MISSING:
                if kind == "missing" and index == len(parts) - 1:
                    out.append(part)  # the field that is missing
                break
            if index + 1 < len(parts) and parts[index + 1] == "[key]":
                return tuple(out), f"the key {key!r} must be text (quote it, or give it a name)"
            if not isinstance(key, (str, int)):
                return tuple(out), f"the key {key!r} must be text"
            out.append(key)
            node = node[key]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            out.append(part)
            node = node[part]
        else:
            break
    return tuple(out), None


_MISSING = object()


# Control characters a value may not hold: C0 but tab and newline, DEL, C1. PyYAML refuses them
# raw, but a double-quoted escape ("\e[31m", "\x07") makes them, and they would reach a terminal
# (escape sequences), a batch script or the database. Lone surrogates ("\ud800") are no
# characters at all: no UTF-8 file can hold them.
_BAD_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
MERGE_TAG = "tag:yaml.org,2002:merge"


def _check_text(text: str, node: yaml.Node, loc: Loc, path: str) -> None:
    bad = _BAD_CHARS.search(text)
    if bad is None:
        return
    char = bad.group()
    if char == "\x00":
        what = "a NUL character (\\0) cannot be part of a value"
    elif "\ud800" <= char <= "\udfff":
        what = f"a lone surrogate (\\u{ord(char):04x}) is not a character: no file can hold it"
    else:
        what = f"a control character (U+{ord(char):04X}) cannot be part of a value"
    raise SourceError(path, node.start_mark.line + 1, format_loc(loc) or None, what)


def _walk(node: yaml.Node, loc: Loc, lines: dict[Loc, int], path: str) -> None:
    """Record the line of every location and refuse what no value may hold. Runs on the composed
    tree, before merge keys (``<<``) are flattened into their mappings: a key written after a
    merge overrides the merged one (YAML's merge key), it is no duplicate."""
    lines[loc] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                _walk(value_node, loc + ("<<",), lines, path)  # for what it holds; its keys are located at their anchor
                continue
            key = key_node.value
            if not isinstance(key, str):
                raise SourceError(path, key_node.start_mark.line + 1, format_loc(loc) or None,
                                  "expected a plain key (a name), got a list or mapping as a key")
            _check_text(key, key_node, loc, path)
            if key in seen:
                raise SourceError(path, key_node.start_mark.line + 1, format_loc(loc + (key,)), "duplicate key")
            seen.add(key)
            _walk(value_node, loc + (key,), lines, path)
            # A key's own line is the better pointer for errors about that key.
            lines[loc + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, loc + (index,), lines, path)
    else:
        _check_text(node.value, node, loc, path)


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

    def construct_object(self, node, deep=False):  # type: ignore[no-untyped-def]
        # A tag with content it cannot hold (``!!bool maybe``, ``!!timestamp nope``, ``!!int ''``)
        # makes PyYAML's constructors raise whatever their parsing hit (KeyError, AttributeError,
        # IndexError...): said here with the value's own line.
        try:
            return super().construct_object(node, deep)
        except (yaml.YAMLError, _Refused, RecursionError, MemoryError):
            raise
        except Exception as exc:
            tag = str(node.tag).replace("tag:yaml.org,2002:", "!!")
            what = f"{node.value!r} is not a valid {tag}" if isinstance(node, yaml.ScalarNode) else \
                f"not a valid {tag}"
            raise _Refused(node.start_mark.line + 1, f"{what} ({type(exc).__name__}: {exc})") from None


class _Refused(Exception):
    def __init__(self, line: int | None, message: str) -> None:
        super().__init__(message)
        self.line, self.message = line, message


def _expanded_size(root: yaml.Node) -> None:
    """Count the values of the tree with aliases expanded (each distinct node once, by memo:
    aliases share node objects); refuse past MAX_VALUES, past MAX_DEPTH levels (the composer's
    bound sees one anchored value at a time: a chain of aliases, each to a value 45 levels deep,
    nests 1,000 levels in 3 KB, and everything after recurses on it) and an alias inside itself."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
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
        depth = 1 + max((depths[id(child)] for child in children), default=0)
        if depth > MAX_DEPTH:
            raise _Refused(node.start_mark.line + 1, f"values nest more than {MAX_DEPTH} levels deep once "
                                                     "its aliases are expanded")
        depths[key] = depth
        if size > MAX_VALUES:
            raise _Refused(node.start_mark.line + 1, f"more than {MAX_VALUES:,} values once its aliases are "
                                                     "expanded (a YAML alias bomb?)")
        sizes[key] = size


def read_source(path: Path | str) -> str:
    """The text of a YAML file; SourceError when it cannot be read. A FIFO or device is refused
    unread (opening a FIFO without a writer would hang), and so is a file over MAX_FILE_BYTES."""
    name = str(path)
    try:
        raw = read_regular(path, MAX_FILE_BYTES)
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:  # the line a person can go to, not a byte offset
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - raw.rfind(b"\n", 0, exc.start)
        raise SourceError(name, line, None, f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at column {column} "
                                            "(save the file as UTF-8)") from None
    except FileNotFoundError:
        raise SourceError(name, None, None, "file not found") from None
    except RefusedFile as exc:
        if exc.reason.startswith("larger than"):
            raise SourceError(name, None, None, f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB: "
                                                "not a sweep file") from None
        raise SourceError(name, None, None, f"cannot read: {exc}") from None
    except OSError as exc:
        raise SourceError(name, None, None, f"cannot read: {exc.strerror or exc}") from None


def load_yaml(path: Path | str, text: str | None = None) -> YamlDocument:
    """Parse ``path`` (or ``text`` named as ``path``); every problem becomes SourceError."""
    name = str(path)
    if text is None:
        text = read_source(path)
    # Bounded in bytes, as read_source bounds the file: a count of characters lets a file of
    # multibyte characters through at up to four times the bound.
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise SourceError(name, None, None, f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB: not a sweep file")
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text)  # its reader checks every character: inside the try
        node = loader.get_single_node()
        lines: dict[Loc, int] = {}
        if node is not None:
            _expanded_size(node)
            _walk(node, (), lines, name)  # before construction flattens merge keys into their mappings
        data = loader.construct_document(node) if node is not None else None
    except _Refused as exc:
        raise SourceError(name, exc.line, None, exc.message) from None
    except yaml.reader.ReaderError as exc:
        at = text.count("\n", 0, exc.position) + 1
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        raise SourceError(name, at, None, f"a control character (U+{ord(char):04X}) cannot be part of a "
                                            "YAML file, not even in a comment") from None
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
        if loader is not None:
            loader.dispose()
    return YamlDocument(name, data, lines)

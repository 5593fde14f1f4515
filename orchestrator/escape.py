"""Values made safe for one line of text: a comment in a file orch writes, a cell on a terminal.

A value from a sweep, a profile or the command line may hold a newline, which in a generated
file's ``# comment`` header starts a live line (a profile's ``python: "x\\nsetup: ..."`` became
a ``setup:`` line of the rehearsal profile), or a terminal escape sequence, which redraws or
retitles the user's terminal when ``orch plan`` prints it. Every control character becomes its
backslash escape, visible and inert; printable text (any script) is left as it is.
"""

from __future__ import annotations

import re

# C0 (newline and tab too), DEL, C1 (U+009B is a one-character escape sequence on some
# terminals), the Unicode line and paragraph separators (line breaks to YAML and to editors)
# and lone surrogates (no UTF-8 encoding: a UnicodeEncodeError when written).
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def one_line(value: object) -> str:
    """``str(value)`` with every control character as its backslash escape; a backslash is
    doubled only where the text has something to escape, so plain paths read as they are."""
    text = str(value)
    if _UNSAFE.search(text) is None:
        return text
    return re.sub(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\\]", _escape, text)


def printable(text: str) -> str:
    """``text`` for a terminal: its lines and tabs kept, every other control character escaped
    (an escape sequence in a value would otherwise act on the terminal it is printed to)."""
    text = str(text)
    if _TERMINAL_UNSAFE.search(text) is None:
        return text
    return "\n".join("\t".join(one_line(part) for part in line.split("\t")) for line in text.split("\n"))


_TERMINAL_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")

"""Errors a user can cause and fix: the CLI prints them on one line and exits 2."""

from __future__ import annotations

from typing import Iterable


class UserError(Exception):
    """A mistake in the user's input; ``str()`` is the whole message."""

    exit_code = 2


class SourceError(UserError):
    """An error located in a file: ``file:line: field: message``."""

    def __init__(self, file: str, line: int | None, field: str | None, message: str) -> None:
        self.file, self.line, self.field, self.message = file, line, field, message
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


def did_you_mean(name: object, known: "Iterable[str]") -> str:
    """``" (did you mean 'gemm'?)"`` for a near miss among ``known`` (difflib's ratio >= 0.6), else ""."""
    import difflib

    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, list(known), n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""

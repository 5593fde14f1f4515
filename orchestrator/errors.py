"""Errors a user can cause and fix: the CLI prints them on one line and exits 2."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in the user's input; ``str()`` is the whole message."""

    exit_code = 2


class SourceError(UserError):
    """An error located in a file: ``file:line: field: message``."""

    def __init__(self, file: str, line: int | None, field: str | None, message: str) -> None:
        self.file, self.line, self.field, self.message = file, line, field, message
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")

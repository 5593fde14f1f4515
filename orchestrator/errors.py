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


class SourceErrors(SourceError):
    """Several errors in one file, reported together (issue 27: only the first was): the first's
    ``file``, ``line``, ``field`` and ``message``; ``str()`` a count, then each error on a line of
    its own, as each alone would read, at most ``SHOWN`` of them."""

    SHOWN = 20

    def __init__(self, errors: "list[SourceError]") -> None:
        first = errors[0]
        super().__init__(first.file, first.line, first.field, first.message)
        self.errors = list(errors)
        files = list(dict.fromkeys(e.file for e in errors))
        lines = [f"{len(errors)} problems in {', '.join(files)}:"]
        lines += [f"  {e}" for e in errors[:self.SHOWN]]
        if len(errors) > self.SHOWN:
            lines.append(f"  ... and {len(errors) - self.SHOWN} more")
        self.args = ("\n".join(lines),)

    def __str__(self) -> str:
        return str(self.args[0])


def raise_all(errors: "list[SourceError]") -> None:
    """Raise nothing, the one error, or every error in one :class:`SourceErrors` (in file and line
    order, each (file, line, message) once)."""
    flat = [inner for e in errors for inner in (e.errors if isinstance(e, SourceErrors) else [e])]
    unique = list({(e.file, e.line, str(e)): e for e in flat}.values())
    if not unique:
        return
    if len(unique) == 1:
        raise unique[0]
    unique.sort(key=lambda e: (e.file, e.line or 0))
    raise SourceErrors(unique)

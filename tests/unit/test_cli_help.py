"""Every command says what it does, and every command the README and docs/ name exists.

The typer app is walked through its click objects (``typer.main.get_command``), in process:
no ``orch --help`` subprocess per command.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import pytest
import typer

from orchestrator.cli.app import app

REPO = Path(__file__).resolve().parents[2]
WORD = re.compile(r"^[a-z][a-z0-9-]*$")  # a command's name, as opposed to a value or a placeholder
# "orch" as a word of its own (not .venv/bin/orch, .orch/, orch-array-..., orchestrator).
ORCH = re.compile(r"(?<![\w./-])orch(?![\w./-])")


def root() -> Any:
    return typer.main.get_command(app)


def subcommands(command: Any) -> dict[str, Any]:
    """A group's commands by name (empty for a plain command)."""
    return dict(getattr(command, "commands", None) or {})


def walk(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(names after ``orch``, command) of the app and every command and group under it."""
    yield path, command
    for name, sub in sorted(subcommands(command).items()):
        yield from walk(sub, path + (name,))


def label(path: tuple[str, ...]) -> str:
    return " ".join(("orch",) + path)


def test_the_walk_sees_every_level() -> None:
    found = {path for path, _ in walk(root())}
    assert {("plan",), ("status",), ("sites",), ("sites", "list"), ("sandbox", "up"), ("db", "url")} <= found


def test_every_command_and_group_has_help() -> None:
    missing = [label(path) for path, command in walk(root()) if not (command.help or "").strip()]
    assert not missing, "commands without help (a docstring or help=):\n" + "\n".join(missing)


def test_every_option_and_argument_has_help() -> None:
    missing = []
    for path, command in walk(root()):
        for param in command.params:
            if getattr(param, "hidden", False):
                continue
            if not (getattr(param, "help", None) or "").strip():
                name = "/".join(getattr(param, "opts", None) or [param.name])
                missing.append(f"{label(path)}: {param.param_type_name} {name}")
    assert not missing, "parameters without help=:\n" + "\n".join(missing)


# ------------------------------------------------------------------ commands the README names


def code_of(markdown: str) -> list[str]:
    """The text of every fenced code block and every inline code span (one may run over a line
    break inside a paragraph)."""
    pieces: list[str] = []
    prose: list[str] = []
    fence: str | None = None
    block: list[str] = []
    for line in markdown.splitlines():
        marker = re.match(r"^\s*(```|~~~)", line)
        if fence is None and marker:
            fence, block = marker.group(1), []
        elif fence is not None and line.strip().startswith(fence):
            pieces.append("\n".join(block))
            fence = None
            prose.append("")  # a block ends a paragraph
        elif fence is not None:
            block.append(line)
        else:
            prose.append(line)
    for paragraph in re.split(r"\n\s*\n", "\n".join(prose)):
        pieces += [" ".join(span.split()) for span in re.findall(r"(?<!`)`([^`]+)`(?!`)", paragraph)]
    return pieces


def global_options_with_values(command: Any) -> set[str]:
    """``orch``'s own options that take a value (``--db URL``), so that the value is skipped."""
    return {opt for param in command.params if param.param_type_name == "option" and not param.is_flag
            for opt in param.opts}


def named_commands(text: str, takes_value: set[str]) -> Iterator[tuple[str, ...]]:
    """``(command,)`` or ``(group, subcommand)`` for each ``orch ...`` in the text."""
    for line in text.splitlines():
        for match in ORCH.finditer(line):
            words = line[match.end():].split()
            while words and words[0].startswith("-"):  # orch --db URL sql ...
                option = words.pop(0)
                if option in takes_value and words:
                    words.pop(0)
            if not words or not WORD.match(words[0]):
                continue  # `orch` alone, or a placeholder (orch COMMAND)
            # The second word counts only for a group (orch sites list); a plain command's is a value.
            yield (words[0], words[1]) if len(words) > 1 and WORD.match(words[1]) else (words[0],)


def documented_pages() -> list[Path]:
    """The README and every page of docs/ (the user guide moved there from the README)."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def readme_commands() -> set[tuple[str, ...]]:
    takes_value = global_options_with_values(root())
    return {named for page in documented_pages() for text in code_of(page.read_text())
            for named in named_commands(text, takes_value)}


def test_the_readme_parser_finds_the_commands() -> None:
    sample = ("Run it:\n\n```sh\norch --db sqlite:///x.db sql \"SELECT 1\"\n./scripts/quickstart.sh\n```\n\n"
              "Then `orch sites show SITE` and `orch\n  status`; `.venv/bin/orch`, `orch`, `.orch/` name none.\n")
    takes_value = global_options_with_values(root())
    found = {named for text in code_of(sample) for named in named_commands(text, takes_value)}
    assert found == {("sql",), ("sites", "show"), ("status",)}
    commands = readme_commands()
    assert {("plan",), ("run",), ("sql",)} <= {c[:1] for c in commands}
    assert ("sites", "list") in commands and ("sandbox", "up") in commands


def unknown_commands(named: set[tuple[str, ...]]) -> list[str]:
    top = root()
    bad = []
    for words in sorted(named):
        command = subcommands(top).get(words[0])
        if command is None:
            bad.append(f"orch {words[0]}: no such command")
            continue
        group = subcommands(command)
        if group and len(words) > 1 and words[1] not in group:
            bad.append(f"orch {words[0]} {words[1]}: no such subcommand of {words[0]}")
    return bad


@pytest.mark.parametrize("named", [{("plna",)}, {("sites", "lsit")}])
def test_a_misspelt_command_is_caught(named: set[tuple[str, ...]]) -> None:
    assert unknown_commands(named)


def test_every_command_the_readme_names_exists() -> None:
    bad = unknown_commands(readme_commands())
    assert not bad, "README.md or docs/ name commands the app does not have:\n" + "\n".join(bad)


def test_prose_paragraphs_are_joined_even_where_a_line_begins_with_an_option() -> None:
    """A wrapped line that starts with ``--seq`` is prose, not a list: `orch predict --help` printed
    its model paragraph with the docstring's line breaks before."""
    for path, command in walk(root()):
        for paragraph in (command.help or "").split("\n\n"):
            lines = paragraph.split("\n")
            if len(lines) > 1 and not any(line.startswith((" ", "- ", "* ", "\b", "|")) for line in lines):
                raise AssertionError(f"{label(path)}: a prose paragraph kept its line breaks: {paragraph[:120]!r}")
    predict = subcommands(root())["predict"]
    assert "(the time model's own presets: the gpt2 workload has no such model)" in predict.help

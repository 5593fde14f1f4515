"""The command line stays thin (issue 46): one module per command group, none over 300 lines, no
SQL of its own (queries are named functions of orchestrator/results/queries.py), the filter options
declared once with one help text, and `orch --help` listing the commands in the order of the flow.
In process: the typer app's click objects and typer's CliRunner, no `orch` subprocess."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import typer
from typer.testing import CliRunner

from orchestrator.cli.app import app

CLI = Path(__file__).resolve().parents[2] / "orchestrator" / "cli"
SQL = re.compile(r"select |insert |update |delete ", re.IGNORECASE)  # the grep


def commands(command: Any, path: str = "orch") -> Iterator[tuple[str, Any]]:
    yield path, command
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from commands(sub, f"{path} {name}")


def test_no_cli_module_is_over_300_lines() -> None:
    long = {path.name: n for path in CLI.glob("*.py") if (n := len(path.read_text().splitlines())) > 300}
    assert not long, f"modules of orchestrator/cli/ over 300 lines (split them by command group): {long}"


def test_the_cli_holds_no_sql() -> None:
    found = [f"{path.name}:{number}: {line.strip()}" for path in sorted(CLI.glob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1) if SQL.search(line)]
    assert not found, "SQL in orchestrator/cli/ (make it a function of orchestrator/results/queries.py):\n" + \
        "\n".join(found)


def test_orch_help_lists_the_commands_in_the_order_of_the_flow() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0
    listed = [m.group(1) for m in re.finditer(r"^\W+([a-z][a-z-]*)  ", result.output.split("Commands")[1], re.M)]
    assert listed[:4] == ["plan", "submit", "status", "run"], listed
    at = {name: listed.index(name) for name in listed}
    assert at["run"] < at["sql"] < at["export"] < at["report"] < at["sites"] < at["predict"] < at["workloads"]
    assert set(listed) == set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def test_each_filter_option_has_one_help_text() -> None:
    helps: dict[str, dict[str, list[str]]] = {"--site": {}, "--sweep": {}}
    for path, command in commands(typer.main.get_command(app)):
        for param in command.params:
            # predict's --site (a required profile) and report's repeatable --sweep are other options
            if param.param_type_name == "option" and param.opts == [name := param.opts[0]] and name in helps \
                    and not param.required and not param.multiple:
                helps[name].setdefault(param.help, []).append(path)
    for name, texts in helps.items():
        assert len(texts) == 1, f"{name} has {len(texts)} help texts: {texts}"
        assert sum(map(len, texts.values())) >= 5  # submit, status, cancel, follow start, calibrate, ...

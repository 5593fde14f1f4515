"""docs/cli.md is the command reference scripts/cli_reference.py writes from the app's own help
(issue 46): a command, option or help text changed without regenerating it fails here, saying the
command that regenerates it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import pytest
import typer

from orchestrator.cli.app import app

REPO = Path(__file__).resolve().parents[2]


def reference_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cli_reference", REPO / "scripts" / "cli_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def commands(command: Any, path: tuple[str, ...] = ("orch",)) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from commands(sub, path + (name,))


def test_docs_cli_md_is_the_current_reference() -> None:
    why = reference_script().stale()
    assert why is None, why


def test_the_reference_has_every_command_and_every_option() -> None:
    text = reference_script().render()
    missing = []
    for path, command in commands(typer.main.get_command(app)):
        heading = " ".join(path)
        if f"# {heading}\n" not in text:
            missing.append(heading)
        section = text.split(f"# {heading}\n", 1)[-1].split("\n#", 1)[0]
        missing += [f"{heading} {opt}" for param in command.params if param.param_type_name == "option"
                    for opt in param.opts if f"{opt}" not in section]
    assert not missing, "not in the reference:\n" + "\n".join(missing)


def test_a_stale_reference_is_refused_with_the_command_to_regenerate_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = reference_script()
    current = script.render()
    assert "Only the runs on this site." in current
    path = tmp_path / "cli.md"
    path.write_text(current.replace("Only the runs on this site.", "Only this site.", 1))
    assert script.main(["--check", "--output", str(path)]) == 1
    assert "stale" in capsys.readouterr().err
    assert script.main(["--check", "--output", str(tmp_path / "none.md")]) == 1
    assert script.REGENERATE in capsys.readouterr().err
    assert script.main(["--output", str(path)]) == 0
    assert path.read_text() == current
    assert script.main(["--check", "--output", str(path)]) == 0

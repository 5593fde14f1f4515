"""docs/extending.md: each of its six examples (workload, site, launcher, scheduler, lint, view) runs
as the page shows it.

The page's blocks carry their role in the info string: ``extending:NAME new=PATH`` (a new file),
``extending:NAME append=PATH`` (lines added at the end of an existing file), a ``diff`` block
(applied with ``patch -p1``), an ``sh`` block (commands, run with bash) and an ``output`` block
(every line of it must appear in what the example's commands printed). The checkout is copied into
a temporary directory once a module, every file block applied there, and each example's commands
run in that copy with its own ``ORCH_HOME``, through ``python -m orchestrator.cli`` of the copy: the
registries, templates and migrations are the copy's, changed as the page says.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "extending.md"
EXAMPLES = ("workload", "site", "launcher", "executor", "lint", "view")
# ```lang extending:NAME [new=PATH | append=PATH | output]
FENCE = re.compile(r"^```(\w+) extending:([\w-]+)(?: (new|append)=(\S+)| (output))?\n(.*?)^```$", re.M | re.S)
COPIED = ("orchestrator", "workloads", "templates", "sites", "db", "examples")


@dataclass
class Example:
    files: list[tuple[str, str, str]] = field(default_factory=list)  # (new|append|diff, path, text)
    commands: list[str] = field(default_factory=list)
    output: list[str] = field(default_factory=list)


def examples(text: str) -> dict[str, Example]:
    found: dict[str, Example] = {}
    for lang, name, mode, path, output, body in FENCE.findall(text):
        example = found.setdefault(name, Example())
        if output:
            example.output += [line for line in body.splitlines() if line.strip()]
        elif mode:
            example.files.append((mode, path, body))
        elif lang == "diff":
            example.files.append(("diff", "", body))
        elif lang == "sh":
            example.commands.append(body)
        else:
            raise AssertionError(f"docs/extending.md: a {lang} block of {name} says neither new=, append= nor output")
    return found


def test_the_page_has_all_six_examples_each_with_commands_and_expected_output() -> None:
    found = examples(PAGE.read_text())
    assert sorted(found) == sorted(EXAMPLES)
    for name, example in found.items():
        assert example.files or name == "site" or example.commands, name
        assert example.commands and example.output, f"{name}: no commands or no expected output"


def test_the_block_reader_tells_the_roles_apart() -> None:
    sample = ("```python extending:x new=a/b.py\nA = 1\n```\n\n```python extending:x append=c.py\nB = 2\n```\n\n"
              "```diff extending:x\n--- a/f\n```\n\n```sh extending:x\necho hi\n```\n\n"
              "```text extending:x output\nhi\n```\n")
    example = examples(sample)["x"]
    assert example.files == [("new", "a/b.py", "A = 1\n"), ("append", "c.py", "B = 2\n"), ("diff", "", "--- a/f\n")]
    assert example.commands == ["echo hi\n"] and example.output == ["hi"]


@pytest.fixture(scope="module")
def extended(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Example]]:
    """A copy of the checkout with every file block of the page applied."""
    root = tmp_path_factory.mktemp("extended")
    for name in COPIED:  # bytecode too: the copy's unchanged modules need not be compiled again
        shutil.copytree(REPO / name, root / name, symlinks=True)
    shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
    found = examples(PAGE.read_text())
    for name in EXAMPLES:
        for mode, path, text in found[name].files:
            if mode == "diff":
                done = subprocess.run(["patch", "-p1", "--forward", "--fuzz=0"], input=text, text=True, cwd=root,
                                      capture_output=True)
                assert done.returncode == 0, f"{name}: the page's diff does not apply:\n{done.stdout}{done.stderr}"
                continue
            target = root / path
            if mode == "new":
                assert not target.exists(), f"{name}: new={path} exists already"
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
            else:
                assert target.is_file(), f"{name}: append={path}: no such file"
                with target.open("a") as handle:
                    handle.write(text)
    bin_dir = root / ".bin"
    bin_dir.mkdir()
    orch = bin_dir / "orch"
    orch.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m orchestrator.cli "$@"\n')
    orch.chmod(0o755)
    return root, found


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_example_runs_as_the_page_shows_it(extended: tuple[Path, dict[str, Example]], name: str,
                                               tmp_path: Path) -> None:
    root, found = extended
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("ORCH_", "PYTHON")) or key in ("ORCH_LOCAL_CORES_DIR", "PYTHONDONTWRITEBYTECODE")}
    # The copy's packages first, and no start-up shim: its processes import the copy, cold.
    env.update(PYTHONPATH=str(root), ORCH_HOME=str(tmp_path / "home"), ORCH_TEST_COLD="1",
               PATH=f"{root / '.bin'}{os.pathsep}{env.get('PATH', '')}")
    printed = ""
    for commands in found[name].commands:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", commands], cwd=root, env=env, text=True,
                              capture_output=True, timeout=300)
        printed += done.stdout + done.stderr
        assert done.returncode == 0, f"{name}: exit {done.returncode} from\n{commands}\n{printed}"
    missing = [line for line in found[name].output if line not in printed]
    assert not missing, f"{name}: the page shows {missing}, the commands printed:\n{printed}"


def test_the_examples_python_passes_the_style_gate(extended: tuple[Path, dict[str, Example]]) -> None:
    """The code a reader copies is held to the project's own ruff settings (pyproject.toml)."""
    root, found = extended
    touched = sorted({path for example in found.values() for mode, path, _ in example.files
                      if path.endswith(".py")})
    assert touched
    done = subprocess.run([str(Path(sys.executable).parent / "ruff"), "check", "--no-cache", *touched], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr

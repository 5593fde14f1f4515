"""The style gate: ruff (pycodestyle, pyflakes, import order, bugbear) and mypy, clean on the
whole tree, with the settings in pyproject.toml. Both are installed by scripts/setup.sh (the
`dev` extra), so a fresh machine runs them as CI does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / tool), *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean() -> None:
    proc = _run("ruff", "check", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


def test_mypy_is_clean(tmp_path: Path) -> None:
    # A cache of its own: a fresh machine's run, and no cache left in the checkout.
    proc = _run("mypy", "--cache-dir", str(tmp_path / "mypy"))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]

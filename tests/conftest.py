"""Shared fixtures: an isolated orch working directory and a way to run the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh directory to run orch in: its own .orch/ state and SQLite database."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB_URL", raising=False)
    monkeypatch.delenv("ORCH_HOME", raising=False)
    monkeypatch.delenv("ORCH_SITES_PATH", raising=False)
    return tmp_path


def run_orch(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600,
             check: bool = False) -> subprocess.CompletedProcess[str]:
    """``orch ARGS`` in a real process, as a user would run it."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    full_env.update({"COLUMNS": "200", **(env or {})})
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"orch {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture(scope="session")
def pg_admin_url():
    """A real PostgreSQL server (the machine's, or one started from Debian's packages)."""
    from tests import pg

    yield from pg.server_url()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, workdir: Path):
    """Each database test runs on SQLite and on a real PostgreSQL (fresh database each time)."""
    if request.param == "sqlite":
        yield f"sqlite:///{workdir / 'orch-test.db'}"
        return
    from tests import pg

    yield from pg.fresh_database(request.getfixturevalue("pg_admin_url"))

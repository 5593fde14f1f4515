"""Where orch finds its data (templates, site profiles, migrations) and keeps its state.

From a checkout the data lives at the top of the repository (the product card's
layout); from an installed wheel it travels as ``orchestrator/_data/``.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
_CHECKOUT_ROOT = PACKAGE_DIR.parent
_WHEEL_DATA = PACKAGE_DIR / "_data"

SITES_PATH_ENV = "ORCH_SITES_PATH"
DB_URL_ENV = "ORCH_DB_URL"
HOME_ENV = "ORCH_HOME"


def data_dir(name: str) -> Path:
    """The directory ``name`` (templates, sites, db) from a checkout or the wheel."""
    for base in (_CHECKOUT_ROOT, _WHEEL_DATA):
        candidate = base / name
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"orch data directory {name!r} not found under {_CHECKOUT_ROOT} or {_WHEEL_DATA}")


def templates_dir() -> Path:
    return data_dir("templates")


def builtin_sites_dir() -> Path:
    return data_dir("sites")


def migrations_dir() -> Path:
    return data_dir("db") / "migrations"


def db_views_dir() -> Path:
    return data_dir("db") / "views"


@functools.cache
def workloads_root() -> Path:
    """The directory that holds the ``workloads`` package (goes on the job's PYTHONPATH).

    Cached: a filesystem ``realpath``, asked for by every run of a plan, and the package
    does not move while orch runs."""
    import workloads

    return Path(workloads.__file__).resolve().parent.parent


def sites_search_path(extra: list[Path] | None = None) -> list[Path]:
    """User directories first (``--sites-dir``, then ``$ORCH_SITES_PATH``), built-in last."""
    dirs: list[Path] = list(extra or [])
    env = os.environ.get(SITES_PATH_ENV, "")
    dirs += [Path(p).expanduser() for p in env.split(os.pathsep) if p]
    dirs.append(builtin_sites_dir())
    return dirs


def state_dir(cwd: Path | None = None) -> Path:
    """``.orch/`` in the working directory (or ``$ORCH_HOME``): database and run directories."""
    env = os.environ.get(HOME_ENV)
    return Path(env).expanduser() if env else (cwd or Path.cwd()) / ".orch"


def default_db_url(cwd: Path | None = None) -> str:
    return os.environ.get(DB_URL_ENV) or f"sqlite:///{state_dir(cwd) / 'orch.db'}"

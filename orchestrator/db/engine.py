"""Connecting to the database and bringing its schema up to date.

SQLite (the default, one file under ``.orch/``) runs in WAL mode with a busy
timeout so two ``orch`` processes can share it; PostgreSQL takes its password
from the URL, ``PGPASSWORD`` or ``~/.pgpass`` (libpq), never from orch's files.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session, sessionmaker

from orchestrator import paths
from orchestrator.errors import UserError


def redact(url: str) -> str:
    """The URL with any password hidden, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<invalid database URL>"


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def make_engine(url: str) -> Engine:
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise UserError(f"invalid database URL {redact(url)!r} (expected e.g. sqlite:///path.db "
                        "or postgresql://user@host/db)") from None
    if parsed.drivername.startswith("sqlite"):
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    try:
        return create_engine(url, pool_pre_ping=True)
    except ModuleNotFoundError as exc:
        raise UserError(f"database driver missing for {parsed.drivername}: {exc.name} "
                        "(for PostgreSQL: pip install 'orch[postgres]')") from None


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(paths.migrations_dir()))
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply migrations up to ``revision`` (idempotent)."""
    config = _alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(_alembic_config()).get_current_head()


def open_database(url: str) -> sessionmaker[Session]:
    """An engine on ``url`` with its schema at head, as a session factory."""
    engine = make_engine(url)
    try:
        if current_revision(engine) != head_revision():
            upgrade(engine)
    except UserError:
        raise
    except Exception as exc:  # connection refused, auth failed, ...
        raise UserError(f"cannot open database {redact(url)}: {str(exc).splitlines()[0]}") from None
    return sessionmaker(engine, expire_on_commit=False)

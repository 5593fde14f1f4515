"""Connecting to the database and bringing its schema up to date.

SQLite (the default, one file under ``.orch/``) runs in WAL mode with a busy
timeout so two ``orch`` processes can share it; PostgreSQL takes its password
from the URL, ``PGPASSWORD`` or ``~/.pgpass`` (libpq), never from orch's files.

PostgreSQL goes through psycopg 3, SQLAlchemy's default driver for ``postgresql://``
(and ``postgresql+psycopg://``); ``postgresql+psycopg2://`` works where psycopg2 is
installed. A read-only engine (``orch sql`` without ``--write``) refuses every write
in the database itself: SQLite's ``query_only`` with deferred transactions (a reader
never waits for another process's write lock), PostgreSQL's
``default_transaction_read_only``.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from orchestrator import paths
from orchestrator.errors import UserError

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.orm import Session, sessionmaker

# alembic is imported only when migrating, and the ORM only by commands that use it: most
# commands just check the revision, and `orch status` should start fast.


def redact(url: str) -> str:
    """The URL with any password hidden, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<invalid database URL>"


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    # Let SQLAlchemy, not the driver, decide when transactions begin (see _begin_immediate).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    # Grouped queries over a million result rows read much of the file: map as much of it as
    # SQLite's build allows (it caps the request; 2 GiB in Debian's) instead of a read() per
    # page (~30% slower), and keep a larger page cache than SQLite's 2 MB default.
    cursor.execute("PRAGMA mmap_size=68719476736")
    cursor.execute("PRAGMA cache_size=-131072")
    cursor.close()


# A reader's bounds. query_only refuses writes to the database, but ATTACH (and VACUUM INTO,
# which attaches its target) still creates an empty file at any path the query names, so the
# authorizer refuses them; and no single value a query builds may exceed 64 MiB.
READ_ONLY_VALUE_LIMIT = 64 * 1024 * 1024
ATTACH_REFUSED = "not authorized"


def _sqlite_refuse_attach(action: int, *_args: object) -> int:
    return sqlite3.SQLITE_DENY if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH) else sqlite3.SQLITE_OK


def _sqlite_query_only(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    dbapi_connection.execute("PRAGMA query_only=ON")
    dbapi_connection.set_authorizer(_sqlite_refuse_attach)
    dbapi_connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, READ_ONLY_VALUE_LIMIT)


def _begin_immediate(connection) -> None:  # type: ignore[no-untyped-def]
    # Take the write lock when a transaction starts: two orch processes then queue up (up to
    # busy_timeout) instead of one failing on a stale snapshot halfway through its work.
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _begin_deferred(connection) -> None:  # type: ignore[no-untyped-def]
    # A reader's transaction: WAL readers see the last commit and never wait for a writer.
    connection.exec_driver_sql("BEGIN")


DIALECTS = ("sqlite", "postgresql")
URL_EXAMPLE = "expected e.g. sqlite:///path/orch.db or postgresql://user@host:5432/dbname"
# The pip package that brings each PostgreSQL driver SQLAlchemy may be asked for.
_DRIVER_PACKAGES = {"psycopg": "pip install 'psycopg[binary]' (orch's own dependency)",
                    "psycopg2": "pip install psycopg2-binary, or use postgresql:// (psycopg 3)"}


def make_engine(url: str | URL, read_only: bool = False) -> Engine:
    """An engine on ``url`` (nothing is connected yet); ``read_only`` refuses every write."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise UserError(f"invalid database URL ({URL_EXAMPLE})") from None
    dialect = parsed.get_backend_name()
    if dialect not in DIALECTS:
        raise UserError(f"unknown database {dialect!r} in {redact(str(url))} ({URL_EXAMPLE})")
    if dialect == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            folder = Path(parsed.database).expanduser().parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise UserError(f"cannot create the database folder {folder}: "
                                "a file is in the way (not a folder)") from None
            except OSError as exc:
                raise UserError(f"cannot create the database folder {folder}: "
                                f"{exc.strerror or exc}") from None
        engine = _create(url, parsed, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        if read_only:
            event.listen(engine, "connect", _sqlite_query_only)
        event.listen(engine, "begin", _begin_deferred if read_only else _begin_immediate)
        return engine
    if parsed.password is None and os.environ.get("PGPASSWORD"):
        # Keep libpq's variable working, but out of the environment jobs inherit.
        url = parsed.set(password=os.environ.pop("PGPASSWORD"))
    if not read_only:
        return _create(url, parsed, pool_pre_ping=True)
    # A read-only transaction can be ended and another begun READ WRITE in the same text
    # ("COMMIT; BEGIN READ WRITE; CREATE TABLE ...; COMMIT" wrote without --write), and only the
    # simple query protocol runs several statements. Preparing every statement (psycopg 3's
    # prepare_threshold 0) sends it by the extended protocol: the server itself then refuses
    # more than one statement per call (MULTIPLE_STATEMENTS_REFUSED). psycopg2 has no extended
    # protocol: a read-only engine is refused on it.
    if parsed.get_driver_name() != "psycopg":
        _create(url, parsed).dispose()  # an unknown or missing driver says so first (no connection is made)
        raise UserError(f"a read-only connection needs the psycopg (3) driver, not {parsed.drivername!r}: "
                        "use postgresql:// or postgresql+psycopg://")
    connect_args: dict[str, object] = {"options": "-c default_transaction_read_only=on", "prepare_threshold": 0}
    return _create(url, parsed, pool_pre_ping=True, connect_args=connect_args)


# What the server says of several statements sent as one prepared statement.
MULTIPLE_STATEMENTS_REFUSED = "cannot insert multiple commands into a prepared statement"
# What SQLite's driver says of several statements in one call.
SQLITE_ONE_STATEMENT = "You can only execute one statement at a time"


def is_several_statements(exc: DBAPIError) -> bool:
    """Whether the database refused a call because it held more than one statement."""
    text = str(exc.orig)
    return MULTIPLE_STATEMENTS_REFUSED in text or SQLITE_ONE_STATEMENT in text


def _create(url: str | URL, parsed: URL, **options: object) -> Engine:
    try:
        return create_engine(url, **options)  # type: ignore[arg-type]
    except ModuleNotFoundError as exc:
        hint = _DRIVER_PACKAGES.get(parsed.get_driver_name(), "pip install 'orch[postgres]'")
        raise UserError(f"database driver missing for {parsed.drivername}: {exc.name} ({hint})") from None
    except ArgumentError as exc:  # NoSuchModuleError: an unknown driver name
        raise UserError(f"unknown database driver {parsed.drivername!r}: {str(exc).splitlines()[0]} "
                        f"({URL_EXAMPLE})") from None


def is_read_only_refusal(exc: DBAPIError) -> bool:
    """Whether the database refused a write because the connection or file is read-only."""
    if getattr(exc.orig, "sqlstate", None) == "25006" or getattr(exc.orig, "pgcode", None) == "25006":
        return True  # PostgreSQL: read_only_sql_transaction
    # SQLite: query_only (or a read-only file), or the reader's authorizer refusing an ATTACH
    return "readonly database" in str(exc.orig) or ATTACH_REFUSED in str(exc.orig)


def _alembic_config() -> "Config":
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(paths.migrations_dir()))
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply migrations up to ``revision`` (idempotent)."""
    from alembic import command

    config = _alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        if not inspect(connection).has_table("alembic_version"):
            return None
        return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def head_revision() -> str | None:
    """The newest migration. Revisions are numbered in order (0001, 0002, ...), each file
    named after its revision, so the head is the highest number."""
    numbers = sorted(p.name.split("_", 1)[0] for p in (paths.migrations_dir() / "versions").glob("[0-9]*_*.py"))
    return numbers[-1] if numbers else None


def open_engine(url: str, read_only: bool = False) -> Engine:
    """An engine on ``url`` with its schema at head (migrated first when it is behind, by a
    writing engine even when ``read_only``)."""
    engine = make_engine(url, read_only=read_only)
    try:
        if current_revision(engine) != head_revision():
            if read_only:
                writer = make_engine(url)
                try:
                    upgrade(writer)
                finally:
                    writer.dispose()
            else:
                upgrade(engine)
    except UserError:
        raise
    except Exception as exc:  # connection refused, auth failed, ...
        raise UserError(f"cannot open database {redact(url)}: {str(exc).splitlines()[0]}") from None
    return engine


def session_factory(engine: Engine) -> "sessionmaker[Session]":
    from sqlalchemy.orm import sessionmaker

    return sessionmaker(engine, expire_on_commit=False)


def open_database(url: str) -> "sessionmaker[Session]":
    """An engine on ``url`` with its schema at head, as a session factory."""
    return session_factory(open_engine(url))

"""SQLite storage: result_rows clustered by the comparison axes, metric_values without a rowid.

SQLite has no hash aggregation: a GROUP BY over a million result rows sorts them all
(~0.7 s) or, through an index on the axes, looks each row up by rowid (~0.4-0.5 s).
Stored as a WITHOUT ROWID table keyed (workload, precision, devices, attempt_id), the
rows already lie in the order comparisons group by, so such a query is one sequential
scan (~0.17 s); a unique index on attempt_id keeps the per-attempt rewrite direct.
metric_values, keyed (attempt_id, name), loses its rowid and with it a second b-tree
per row: ingestion writes one entry per metric instead of two.

PostgreSQL is left as it is: it aggregates by hashing and needs no clustering.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

import re
from pathlib import Path

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

VIEWS = Path(__file__).resolve().parents[2] / "views"
VIEWS_ON_RESULT_ROWS = ("provenance", "cost", "scaling", "repeat_spread", "throughput", "results")
RESULT_KEY = "PRIMARY KEY (workload, precision, devices, attempt_id)"


def _rebuild(table: str, old_key: str, new_key: str, without_rowid: bool) -> None:
    """Recreate ``table`` from its own CREATE statement with another key and/or rowid setting,
    keeping every row, column, type and foreign key (its indexes are the caller's)."""
    create = op.get_bind().exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).scalar_one()
    if old_key not in create:
        raise RuntimeError(f"migration 0004: {table} does not have the expected {old_key}")
    create = create.replace(old_key, new_key).rstrip().removesuffix(" WITHOUT ROWID")
    if without_rowid:
        create += " WITHOUT ROWID"
    staged = f"{table}_0004"
    # The name as SQLite kept it: bare as created, quoted once a table was renamed to it.
    staged_create, found = re.subn(rf'^CREATE TABLE\s+("?){table}\1\s', f"CREATE TABLE {staged} ", create, count=1)
    if not found:
        raise RuntimeError(f"migration 0004: unexpected CREATE statement for {table}")
    op.execute(staged_create)
    op.execute(f"INSERT INTO {staged} SELECT * FROM {table}")
    op.execute(f"DROP TABLE {table}")
    op.execute(f"ALTER TABLE {staged} RENAME TO {table}")


def _drop_views() -> None:
    for view in VIEWS_ON_RESULT_ROWS:
        op.execute(f"DROP VIEW IF EXISTS {view}")


def _create_views() -> None:
    op.execute((VIEWS / "results_0003.sql").read_text())
    for statement in (VIEWS / "derived_0002.sql").read_text().split("\n;;\n"):
        if statement.strip():
            op.execute(statement)


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    # The views name result_rows; SQLite checks them on a rename, so they go first and come back last.
    _drop_views()
    _rebuild("result_rows", "PRIMARY KEY (attempt_id)", RESULT_KEY, without_rowid=True)
    op.create_index("ix_result_rows_attempt", "result_rows", ["attempt_id"], unique=True)
    op.create_index("ix_result_rows_run_id", "result_rows", ["run_id"])
    op.create_index("ix_result_rows_sweep", "result_rows", ["sweep"])
    _rebuild("metric_values", "PRIMARY KEY (attempt_id, name)", "PRIMARY KEY (attempt_id, name)", without_rowid=True)
    _create_views()


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _drop_views()
    _rebuild("result_rows", RESULT_KEY, "PRIMARY KEY (attempt_id)", without_rowid=False)
    op.create_index("ix_result_rows_axes", "result_rows", ["workload", "precision", "devices"])
    op.create_index("ix_result_rows_run_id", "result_rows", ["run_id"])
    op.create_index("ix_result_rows_sweep", "result_rows", ["sweep"])
    _rebuild("metric_values", "PRIMARY KEY (attempt_id, name)", "PRIMARY KEY (attempt_id, name)", without_rowid=False)
    _create_views()

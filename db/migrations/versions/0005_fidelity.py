"""Figures by one definition each: total-based and median-based rates, cores and threads a run
held, global batch, start time; prices per device-hour; reference figures; scaling by mode.

- metrics and result_rows gain tokens_per_s_median, samples_per_s_median, tflops_median,
  timed_time_s, global_batch, cores, threads; result_rows gains started_at.
- runs gains the site's price as planned (price_per_device_hour, price_currency, price_source) and
  shape_params (the parameters without gradient accumulation: strong scaling's grouping).
- reference_figures: published or earlier figures a result is checked against.
- Views from db/views/results_0005.sql and derived_0005.sql: scaling in weak and strong mode with
  a per-system baseline and epoch-time speedup; cost per result and per unit of price;
  reference_check.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

VIEWS = Path(__file__).resolve().parents[2] / "views"
TZ = sa.DateTime(timezone=True)
# Every view, dependants first (PostgreSQL refuses to drop a view others read).
ALL_VIEWS = ("reference_check", "provenance", "cost", "scaling", "repeat_spread", "throughput", "results")
NEW_METRICS = ("tokens_per_s_median", "samples_per_s_median", "tflops_median", "timed_time_s", "global_batch",
               "cores", "threads")
PRICE_COLUMNS = (("price_per_device_hour", sa.Float), ("price_currency", sa.String(10)), ("price_source", sa.Text),
                 # the parameters without how a global batch is split (strong scaling groups by them)
                 ("shape_params", sa.Text))


def _drop_views() -> None:
    for view in ALL_VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {view}")


def _create_views(results_sql: str, derived_sql: str) -> None:
    op.execute((VIEWS / results_sql).read_text())
    for statement in (VIEWS / derived_sql).read_text().split("\n;;\n"):
        if statement.strip():
            op.execute(statement)


def _drop_column(table: str, column: str) -> None:
    # Plain ALTER TABLE ... DROP COLUMN: SQLite >= 3.35 and PostgreSQL both have it, and on
    # SQLite it keeps result_rows' WITHOUT ROWID layout (a batch rebuild would not).
    op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")


def upgrade() -> None:
    _drop_views()
    for name in NEW_METRICS:
        op.add_column("metrics", sa.Column(name, sa.Float))
        op.add_column("result_rows", sa.Column(name, sa.Float))
    op.add_column("result_rows", sa.Column("started_at", TZ))
    for name, kind in PRICE_COLUMNS:
        op.add_column("runs", sa.Column(name, kind))
    op.create_table(
        "reference_figures",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(64), nullable=False, unique=True),  # hash of what it applies to
        sa.Column("name", sa.String(200)),
        sa.Column("workload", sa.String(100), nullable=False),
        sa.Column("site", sa.String(100)),
        sa.Column("system", sa.String(100)),
        sa.Column("device_model", sa.String(200)),
        sa.Column("precision", sa.String(10)),
        sa.Column("devices", sa.Integer),
        sa.Column("strategy", sa.String(40)),
        sa.Column("batch_size", sa.Integer),
        sa.Column("seq_len", sa.Integer),
        sa.Column("params", sa.Text),
        sa.Column("metric", sa.String(100), nullable=False),
        sa.Column("value", sa.Float, nullable=False),
        sa.Column("tolerance", sa.Float, nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("created_at", TZ),
    )
    op.create_index("ix_reference_figures_workload", "reference_figures", ["workload", "metric"])
    # Rows already written keep their figures: copy the new ones over from metrics and attempts.
    copied = ", ".join(f"{name} = (SELECT m.{name} FROM metrics m WHERE m.attempt_id = result_rows.attempt_id)"
                       for name in NEW_METRICS)
    op.execute(f"UPDATE result_rows SET {copied}, "
               "started_at = (SELECT a.started_at FROM attempts a WHERE a.id = result_rows.attempt_id)")
    op.execute("UPDATE runs SET shape_params = params")  # older runs: as planned (grad_accum kept)
    _create_views("results_0005.sql", "derived_0005.sql")


def downgrade() -> None:
    _drop_views()
    op.drop_index("ix_reference_figures_workload", table_name="reference_figures")
    op.drop_table("reference_figures")
    for name, _ in PRICE_COLUMNS:
        _drop_column("runs", name)
    _drop_column("result_rows", "started_at")
    for name in NEW_METRICS:
        _drop_column("result_rows", name)
        _drop_column("metrics", name)
    _create_views("results_0003.sql", "derived_0002.sql")

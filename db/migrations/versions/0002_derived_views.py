"""Provenance columns (orch version, code revision, site price), metric_values, and derived views:
throughput, repeat_spread, scaling, cost, provenance.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

VIEWS = Path(__file__).resolve().parents[2] / "views"
DERIVED = ("provenance", "cost", "scaling", "repeat_spread", "throughput")


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("cost_per_node_hour", sa.Float))
        batch.add_column(sa.Column("orch_version", sa.String(40)))
    with op.batch_alter_table("metrics") as batch:
        batch.add_column(sa.Column("code_revision", sa.String(80)))
    # Every numeric metric a workload reported, one row each (the headline ones included),
    # so figures that have no column (forward/backward split, per-size bandwidth) are queryable.
    op.create_table(
        "metric_values",
        sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempts.id"), primary_key=True),
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("value", sa.Float, nullable=False),
    )
    for statement in (VIEWS / "derived_0002.sql").read_text().split("\n;;\n"):
        if statement.strip():
            op.execute(statement)


def downgrade() -> None:
    for view in DERIVED:
        op.execute(f"DROP VIEW IF EXISTS {view}")
    op.drop_table("metric_values")
    with op.batch_alter_table("metrics") as batch:
        batch.drop_column("code_revision")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("orch_version")
        batch.drop_column("cost_per_node_hour")

"""Per-step series (issue 29): ``metric_series``, one row per point of a series a metrics file
holds (``series.<name>.steps``/``values``, e.g. the training loss every k-th step), for the
report's ``loss_curve`` figure and for SQL (``SELECT step, value FROM metric_series WHERE
name = 'loss'``).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "metric_series",
        sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempts.id"), primary_key=True),
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("step", sa.BigInteger, primary_key=True),
        sa.Column("value", sa.Float, nullable=False),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("metric_series")

"""Requeues: ``attempts.run_count``, how many times the scheduler started the attempt's job (PBS's
``run_count``: more than 1 after a ``qrerun`` or a node-failure requeue). The attempt's
``started_at`` is the last start and ``elapsed_s`` the last run's, so a requeued attempt's times
stay consistent; ``run_count`` says that earlier runs happened. NULL where the scheduler does not
report it (Slurm, local).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


# Plain ALTER TABLE, not a batch: on SQLite a batch copies and drops `attempts`, which the
# metrics and result rows reference, and SQLite's foreign keys refuse the DROP with rows present.
# SQLite has both ADD COLUMN and (since 3.35) DROP COLUMN for a plain column like this one.
def upgrade() -> None:
    op.add_column("attempts", sa.Column("run_count", sa.Integer))


def downgrade() -> None:
    op.drop_column("attempts", "run_count")

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


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("run_count", sa.Integer))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("run_count")

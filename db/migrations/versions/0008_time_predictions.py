"""Time predictions stored per run: ``runs.predicted_step_s`` and ``runs.predicted_run_s`` (the
time model's step and whole-run seconds when orch planned the run, orchestrator/predict/perfmodel/),
and the ``prediction_error`` view (db/views/prediction_error_0008.sql) extended with the
predicted against the measured step time.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

VIEWS = Path(__file__).resolve().parents[2] / "views"


def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS prediction_error")
    op.add_column("runs", sa.Column("predicted_step_s", sa.Float))
    op.add_column("runs", sa.Column("predicted_run_s", sa.Float))
    op.execute((VIEWS / "prediction_error_0008.sql").read_text())


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS prediction_error")
    op.execute("ALTER TABLE runs DROP COLUMN predicted_run_s")
    op.execute("ALTER TABLE runs DROP COLUMN predicted_step_s")
    op.execute((VIEWS / "prediction_error_0007.sql").read_text())

"""Predictions stored per run: ``runs.predicted_peak_gb`` (the per-device peak of live tensor
memory orch predicted when it planned the run, orchestrator/predict/memory_trace.py) and the
``prediction_error`` view (db/views/prediction_error_0007.sql) setting it beside the measured peak.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

VIEWS = Path(__file__).resolve().parents[2] / "views"


def prediction_error_view_sql() -> str:
    return (VIEWS / "prediction_error_0007.sql").read_text()


def upgrade() -> None:
    op.add_column("runs", sa.Column("predicted_peak_gb", sa.Float))
    op.execute(prediction_error_view_sql())


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS prediction_error")
    op.execute("ALTER TABLE runs DROP COLUMN predicted_peak_gb")

"""LLM inference (study D.3): the site's peak memory bandwidth kept per run (for MBU) and the
``inference`` view (db/views/inference_0006.sql).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

VIEWS = Path(__file__).resolve().parents[2] / "views"
# params is JSON text: each dialect has its own lookup.
MODEL = {"sqlite": "json_extract(rr.params, '$.model')", "postgresql": "(rr.params::json ->> 'model')"}


def inference_view_sql(dialect: str) -> str:
    return (VIEWS / "inference_0006.sql").read_text().replace("{model}", MODEL.get(dialect, "NULL"))


def upgrade() -> None:
    op.add_column("runs", sa.Column("peak_bandwidth_gbs", sa.Float))
    op.execute(inference_view_sql(op.get_bind().dialect.name))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS inference")
    op.execute("ALTER TABLE runs DROP COLUMN peak_bandwidth_gbs")

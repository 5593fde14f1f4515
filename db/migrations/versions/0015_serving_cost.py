"""Serving cost (issue 28): the ``serving`` view again (db/views/serving_0015.sql) with the cost of
1M tokens charged as the ``cost`` view charges (charged_devices), ``usd_per_million_output_tokens``
and ``usd_per_million_tokens`` (input + output) where the site's price is in USD, the input tokens/s
and a ``price_note`` where there is no price.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26
"""

from pathlib import Path

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

VIEWS = Path(__file__).resolve().parents[2] / "views"
# params is JSON text: each dialect has its own lookup (as in 0006 and 0012).
LOOKUP = {"sqlite": "json_extract(rr.params, '$.{name}')", "postgresql": "(rr.params::json ->> '{name}')"}


def serving_view_sql(dialect: str, file: str) -> str:
    text = (VIEWS / file).read_text()
    for name in ("model", "backend", "arrival"):
        text = text.replace("{" + name + "}", LOOKUP[dialect].format(name=name) if dialect in LOOKUP else "NULL")
    return text


def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS serving")
    op.execute(serving_view_sql(op.get_bind().dialect.name, "serving_0015.sql"))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS serving")
    op.execute(serving_view_sql(op.get_bind().dialect.name, "serving_0012.sql"))

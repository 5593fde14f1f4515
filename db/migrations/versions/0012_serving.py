"""LLM serving (issue 28): the ``serving`` view (db/views/serving_0012.sql), one row per completed
``llm_serving`` result: latency percentiles against throughput per offered load, goodput.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26
"""

from pathlib import Path

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

VIEWS = Path(__file__).resolve().parents[2] / "views"
# params is JSON text: each dialect has its own lookup (as in 0006).
LOOKUP = {"sqlite": "json_extract(rr.params, '$.{name}')", "postgresql": "(rr.params::json ->> '{name}')"}


def serving_view_sql(dialect: str) -> str:
    text = (VIEWS / "serving_0012.sql").read_text()
    for name in ("model", "backend", "arrival"):
        text = text.replace("{" + name + "}", LOOKUP[dialect].format(name=name) if dialect in LOOKUP else "NULL")
    return text


def upgrade() -> None:
    op.execute(serving_view_sql(op.get_bind().dialect.name))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS serving")

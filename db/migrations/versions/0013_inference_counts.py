"""The ``inference`` view (db/views/inference_0013.sql) with its counts as integers (concurrency,
input and output lengths were floats: metric_values holds every figure as a float) and the TTFT
sample count beside the percentiles, with ``p99_note`` where a p99 (or p90) comes from too few of
them (issue 27). Replaces 0006's view as 0011 replaced the cost view.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26
"""

from pathlib import Path

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

VIEWS = Path(__file__).resolve().parents[2] / "views"
# params and the metrics file are JSON text: each dialect has its own lookup (as in 0006).
MODEL = {"sqlite": "json_extract(rr.params, '$.model')", "postgresql": "(rr.params::json ->> 'model')"}
SAMPLES = {"sqlite": "(CASE WHEN json_valid(mt.raw) THEN json_extract(mt.raw, '$.timing.timed_steps') END)",
           "postgresql": "(mt.raw::json -> 'timing' ->> 'timed_steps')"}


def inference_view_sql(dialect: str, name: str = "inference_0013.sql") -> str:
    return ((VIEWS / name).read_text().replace("{model}", MODEL.get(dialect, "NULL"))
            .replace("{samples}", SAMPLES.get(dialect, "NULL")))


def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS inference")
    op.execute(inference_view_sql(op.get_bind().dialect.name))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS inference")
    op.execute(inference_view_sql(op.get_bind().dialect.name, "inference_0006.sql"))

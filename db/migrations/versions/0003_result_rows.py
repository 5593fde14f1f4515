"""result_rows: the results view's rows stored once per finished attempt (fast grouped queries).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

VIEWS = Path(__file__).resolve().parents[2] / "views"
TZ = sa.DateTime(timezone=True)
DERIVED = ("provenance", "cost", "scaling", "repeat_spread", "throughput")
METRICS = ("tokens_per_s", "samples_per_s", "tflops", "tflops_per_device", "mfu", "peak_mem_gb", "step_time_s",
           "step_time_p50_s", "step_time_p90_s", "step_time_std_s", "epoch_time_s", "bandwidth_gbs")
# Frozen copy of the row query as of this revision (the application's lives in orchestrator/results/db/results.py).
BACKFILL = """
INSERT INTO result_rows
SELECT a.id, r.id, r.sweep, r.experiment, r.site, r.system, r.workload, a.state, a.failure_class, a.number,
       r.device_type, COALESCE(m.device_model, r.device_model), r.devices, r.nodes, r.precision, r.strategy,
       r.batch_size, r.seq_len, r.repeat, r.params,
       m.tokens_per_s, m.samples_per_s, m.tflops, m.tflops_per_device, m.mfu, m.peak_mem_gb, m.step_time_s,
       m.step_time_p50_s, m.step_time_p90_s, m.step_time_std_s, m.epoch_time_s, m.bandwidth_gbs,
       a.job_id, a.node_list, a.exit_code, a.elapsed_s, a.submitted_at, a.finished_at
FROM attempts a
JOIN runs r ON r.id = a.run_id
LEFT JOIN metrics m ON m.attempt_id = a.id
WHERE a.state IN ('completed', 'failed')
"""


def _recreate_views(results_sql: str) -> None:
    for view in DERIVED:
        op.execute(f"DROP VIEW IF EXISTS {view}")
    op.execute("DROP VIEW IF EXISTS results")
    op.execute((VIEWS / results_sql).read_text())
    for statement in (VIEWS / "derived_0002.sql").read_text().split("\n;;\n"):
        if statement.strip():
            op.execute(statement)


def upgrade() -> None:
    op.create_table(
        "result_rows",
        sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempts.id"), primary_key=True),
        sa.Column("run_id", sa.String(32), nullable=False, index=True),
        sa.Column("sweep", sa.String(200), nullable=False, index=True),
        sa.Column("experiment", sa.String(200), nullable=False),
        sa.Column("site", sa.String(100), nullable=False),
        sa.Column("system", sa.String(100)),
        sa.Column("workload", sa.String(100), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("failure_class", sa.String(30)),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("device_type", sa.String(20)),
        sa.Column("device_model", sa.String(200)),
        sa.Column("devices", sa.Integer, nullable=False),
        sa.Column("nodes", sa.Integer),
        sa.Column("precision", sa.String(10), nullable=False),
        sa.Column("strategy", sa.String(40)),
        sa.Column("batch_size", sa.Integer),
        sa.Column("seq_len", sa.Integer),
        sa.Column("repeat", sa.Integer, nullable=False),
        sa.Column("params", sa.Text, nullable=False),
        *[sa.Column(name, sa.Float) for name in METRICS],
        sa.Column("job_id", sa.String(100)),
        sa.Column("node_list", sa.Text),
        sa.Column("exit_code", sa.Integer),
        sa.Column("elapsed_s", sa.Float),
        sa.Column("submitted_at", TZ),
        sa.Column("finished_at", TZ),
    )
    # Comparisons group by these axes first; the index saves SQLite a sort of every row.
    op.create_index("ix_result_rows_axes", "result_rows", ["workload", "precision", "devices"])
    op.execute(BACKFILL)
    _recreate_views("results_0003.sql")


def downgrade() -> None:
    _recreate_views("results_0001.sql")
    op.drop_table("result_rows")

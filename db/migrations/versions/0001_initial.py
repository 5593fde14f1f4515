"""Initial schema: sweeps, runs, attempts, environments, metrics and the results view.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

VIEWS = Path(__file__).resolve().parents[2] / "views"
TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(200), nullable=False, index=True),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.UniqueConstraint("name", "content_hash"),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("sweep_id", sa.Integer, sa.ForeignKey("sweeps.id"), nullable=False, index=True),
        sa.Column("sweep", sa.String(200), nullable=False, index=True),
        sa.Column("experiment", sa.String(200), nullable=False),
        sa.Column("workload", sa.String(100), nullable=False),
        sa.Column("site", sa.String(100), nullable=False, index=True),
        sa.Column("system", sa.String(100)),
        sa.Column("status", sa.String(20), nullable=False, index=True),
        sa.Column("skip_reason", sa.Text),
        sa.Column("devices", sa.Integer, nullable=False),
        sa.Column("nodes", sa.Integer),
        sa.Column("tasks_per_node", sa.Integer),
        sa.Column("queue", sa.String(100)),
        sa.Column("precision", sa.String(10), nullable=False),
        sa.Column("strategy", sa.String(40)),
        sa.Column("batch_size", sa.Integer),
        sa.Column("seq_len", sa.Integer),
        sa.Column("repeat", sa.Integer, nullable=False),
        sa.Column("params", sa.Text, nullable=False),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("walltime_s", sa.Integer, nullable=False),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("retry_on", sa.Text, nullable=False),
        sa.Column("device_type", sa.String(20)),
        sa.Column("device_model", sa.String(100)),
        sa.Column("peak_tflops", sa.Float),
        sa.Column("scheduler", sa.String(20)),
        sa.Column("script_hash", sa.String(64)),
        sa.Column("script", sa.Text),
        sa.Column("run_dir", sa.Text),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
    )
    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id"), nullable=False, index=True),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("state", sa.String(20), nullable=False, index=True),
        sa.Column("failure_class", sa.String(30)),
        sa.Column("reason", sa.Text),
        sa.Column("scheduler", sa.String(20), nullable=False),
        sa.Column("job_id", sa.String(100), index=True),
        sa.Column("job_name", sa.String(200), nullable=False),
        sa.Column("exit_code", sa.Integer),
        sa.Column("node_list", sa.Text),
        sa.Column("elapsed_s", sa.Float),
        sa.Column("max_rss_mb", sa.Float),
        sa.Column("submitted_at", TZ),
        sa.Column("started_at", TZ),
        sa.Column("finished_at", TZ),
        sa.Column("created_at", TZ, nullable=False),
        sa.UniqueConstraint("run_id", "number"),
    )
    op.create_table(
        "environments",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("content_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("python", sa.String(50)),
        sa.Column("torch", sa.String(50)),
        sa.Column("cuda", sa.String(50)),
        sa.Column("hostname", sa.String(200)),
        sa.Column("data", sa.Text, nullable=False),
    )
    metric_columns = [
        "tokens_per_s", "samples_per_s", "tflops", "tflops_per_device", "mfu", "peak_mem_gb",
        "step_time_s", "step_time_p50_s", "step_time_p90_s", "step_time_std_s", "epoch_time_s",
        "bandwidth_gbs",
    ]
    op.create_table(
        "metrics",
        sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempts.id"), primary_key=True),
        sa.Column("environment_id", sa.Integer, sa.ForeignKey("environments.id")),
        sa.Column("schema", sa.String(40), nullable=False),
        sa.Column("device_model", sa.String(200)),
        sa.Column("world_size", sa.Integer),
        *[sa.Column(name, sa.Float) for name in metric_columns],
        sa.Column("raw", sa.Text, nullable=False),
        sa.Column("ingested_at", TZ, nullable=False),
    )
    op.execute((VIEWS / "results_0001.sql").read_text())


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS results")
    for table in ("metrics", "environments", "attempts", "runs", "sweeps"):
        op.drop_table(table)

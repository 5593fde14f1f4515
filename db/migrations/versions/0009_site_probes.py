"""Site probes: ``site_probes``, one row per ``orch sites probe`` job (orchestrator/run/probe.py):
the site, system and profile hash it proves, its job, its verdict (``passed``, ``failed_checks``),
each check's outcome as a column (python, torch, deepspeed, devices, allreduce_gbs, nodes,
run_dir_visible, modules) and the probe's raw JSON report. ``orch plan`` warns for a site whose
current profile has no passing row.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "site_probes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("site", sa.String(100), nullable=False, index=True),
        sa.Column("system", sa.String(100)),
        sa.Column("profile_hash", sa.String(64), nullable=False, index=True),
        sa.Column("profile_path", sa.Text, nullable=False),
        sa.Column("state", sa.String(20), nullable=False, index=True),
        sa.Column("scheduler", sa.String(20), nullable=False),
        sa.Column("job_id", sa.String(100)),
        sa.Column("run_dir", sa.Text, nullable=False),
        sa.Column("token", sa.String(64), nullable=False),
        sa.Column("nodes_requested", sa.Integer, nullable=False),
        sa.Column("ranks_requested", sa.Integer, nullable=False),
        sa.Column("submitted_at", TZ),
        sa.Column("finished_at", TZ),
        sa.Column("passed", sa.Boolean),
        sa.Column("failed_checks", sa.Text),
        sa.Column("python", sa.Text),
        sa.Column("torch", sa.String(100)),
        sa.Column("deepspeed", sa.String(100)),
        sa.Column("devices", sa.Text),
        sa.Column("allreduce_gbs", sa.Float),
        sa.Column("allreduce_backend", sa.String(20)),
        sa.Column("nodes", sa.Integer),
        sa.Column("run_dir_visible", sa.Boolean),
        sa.Column("modules", sa.Text),
        sa.Column("hostnames", sa.Text),
        sa.Column("checks", sa.Text),
        sa.Column("report", sa.Text),
        sa.Column("created_at", TZ, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("site_probes")

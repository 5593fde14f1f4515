"""One cost definition (issue 27): ``runs.charged_devices``, the devices a centre charges a run
for (every device of its nodes when it holds them whole, as a benchmark run on accelerators does;
else its own), written by `orch plan` by the rule its predicted cost uses; the ``cost`` view
(db/views/cost_0011.sql) prices that many devices, where it priced only the devices the run used.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

VIEWS = Path(__file__).resolve().parents[2] / "views"


def _old_cost() -> str:
    derived = (VIEWS / "derived_0005.sql").read_text().split("\n;;\n")
    return next(s for s in derived if "CREATE VIEW cost AS" in s)


# Plain ALTER TABLE (see 0010): a SQLite batch would copy and drop `runs`, which attempts reference.
def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS cost")
    op.add_column("runs", sa.Column("charged_devices", sa.Integer))
    op.execute((VIEWS / "cost_0011.sql").read_text())


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS cost")
    op.drop_column("runs", "charged_devices")
    op.execute(_old_cost())

"""Epochs (issue 51): a finished sweep repeated over time (``orch again``), and what each attempt
ran with, so a change in a figure can be set beside what changed in its environment.

- ``runs.epoch``: the run's current epoch (1 when planned; ``orch again`` adds one), and
  ``runs.epoch_first_attempt``: the number of that epoch's first attempt, so a sweep's retry
  policy (``max_attempts``) counts the attempts of one epoch, not of the run's whole history.
- ``attempts.epoch``, and the attempt's provenance as submitted: ``script_hash`` (the rendered
  script's sha256, its text kept once in ``scripts``), ``profile_hash`` (the site profile's
  sha256, orchestrator/sites/fingerprint.py) and ``orch_version``.
- ``scripts``: each distinct rendered script once, by its sha256: a new epoch renders the
  script again (``runs.script`` holds the newest), the older ones stay here for the diff.

Existing rows are epoch 1; their scripts are copied into ``scripts`` and their attempts take
the run's script hash (the script they were submitted with: a submitted run is never re-rendered
before this migration).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


# Plain ALTER TABLE, not a batch (as 0010): a batch would copy and drop tables others reference.
def upgrade() -> None:
    op.add_column("runs", sa.Column("epoch", sa.Integer, nullable=False, server_default="1"))
    op.add_column("runs", sa.Column("epoch_first_attempt", sa.Integer, nullable=False, server_default="1"))
    op.add_column("attempts", sa.Column("epoch", sa.Integer, nullable=False, server_default="1"))
    op.add_column("attempts", sa.Column("script_hash", sa.String(64)))
    op.add_column("attempts", sa.Column("profile_hash", sa.String(64)))
    op.add_column("attempts", sa.Column("orch_version", sa.String(40)))
    op.create_table("scripts", sa.Column("sha256", sa.String(64), primary_key=True),
                    sa.Column("text", sa.Text, nullable=False))
    op.execute("INSERT INTO scripts (sha256, text) SELECT script_hash, MIN(script) FROM runs "
               "WHERE script_hash IS NOT NULL AND script IS NOT NULL GROUP BY script_hash")
    op.execute("UPDATE attempts SET script_hash = (SELECT r.script_hash FROM runs r WHERE r.id = attempts.run_id)")


def downgrade() -> None:
    op.drop_table("scripts")
    for column in ("orch_version", "profile_hash", "script_hash", "epoch"):
        op.drop_column("attempts", column)
    for column in ("epoch_first_attempt", "epoch"):
        op.drop_column("runs", column)

"""governance log: data-subject registrations, legal holds and freezes, placed and released,
as one hash chain (position, previous_hash, hash)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

The ``run_subjects``, ``legal_holds`` and ``evidence_freezes`` rows must agree with it: a
subject row deleted, or a hold lifted in SQL without a chained release, is detected by
``runs verify`` and a deletion still sees the subject and the hold (``models.governance``).
Rows written before this revision have no entry and are reported as not chained.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

DIGEST = sa.String(length=71)
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "governance_log",
        sa.Column("position", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("run_id", sa.String(length=512), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("subject_id", sa.String(length=512), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("record", JSON, nullable=False),
        sa.Column("previous_hash", DIGEST, nullable=False),
        sa.Column("hash", DIGEST, nullable=False),
        sa.PrimaryKeyConstraint("position", name=op.f("pk_governance_log")),
    )
    op.create_index(op.f("ix_governance_log_run_id"), "governance_log", ["run_id"])
    op.create_index(op.f("ix_governance_log_subject_id"), "governance_log", ["subject_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_governance_log_subject_id"), table_name="governance_log")
    op.drop_index(op.f("ix_governance_log_run_id"), table_name="governance_log")
    op.drop_table("governance_log")

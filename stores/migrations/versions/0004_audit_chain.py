"""audit chain: the raw-read audit log is hash-chained (position, previous_hash, hash)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

Rows written before this revision keep NULL links and are reported as unchained; every row
written after it links to the one before, so an edited, deleted or reordered audit record
breaks the chain (and the chain's head is anchored outside the database).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

DIGEST = sa.String(length=71)


def upgrade() -> None:
    with op.batch_alter_table("privacy_audit") as batch:
        batch.add_column(sa.Column("position", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("previous_hash", DIGEST, nullable=True))
        batch.add_column(sa.Column("hash", DIGEST, nullable=True))
        batch.create_unique_constraint(op.f("uq_privacy_audit_position"), ["position"])


def downgrade() -> None:
    with op.batch_alter_table("privacy_audit") as batch:
        batch.drop_constraint(op.f("uq_privacy_audit_position"), type_="unique")
        batch.drop_column("hash")
        batch.drop_column("previous_hash")
        batch.drop_column("position")

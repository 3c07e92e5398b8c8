"""alert fingerprints: each Alertmanager fingerprint mapped to one incident for ever

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02

A re-delivered notification (or the same alert firing again) finds its row and opens or
attaches nothing; the row counts its deliveries. An incident lists the alerts attached to it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alert_fingerprints",
        sa.Column("fingerprint", sa.String(length=128), nullable=False),
        sa.Column("incident_id", sa.String(length=512), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("alertname", sa.String(length=255), nullable=True),
        sa.Column("matched_by", sa.String(length=16), nullable=False),
        sa.Column("matched_value", sa.String(length=512), nullable=False),
        sa.Column("deliveries", sa.Integer(), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("fingerprint", name=op.f("pk_alert_fingerprints")),
    )
    op.create_index(
        op.f("ix_alert_fingerprints_incident_id"),
        "alert_fingerprints",
        ["incident_id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_alert_fingerprints_incident_id"), table_name="alert_fingerprints")
    op.drop_table("alert_fingerprints")

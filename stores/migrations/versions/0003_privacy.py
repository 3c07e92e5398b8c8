"""privacy: data keys, raw payloads, run subjects, audit, legal holds, deletion receipts

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-09

The chain table ``execution_events`` is not changed: redaction metadata and encrypted raw
payloads live beside it, so a database at 0001/0002 keeps verifying as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

ID = sa.String(length=512)
DIGEST = sa.String(length=71)


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def _utc() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "data_keys",
        sa.Column("key_id", ID, nullable=False),
        sa.Column("subject_id", ID, nullable=False),
        sa.Column("kek_id", ID, nullable=False),
        sa.Column("wrapped_key", sa.LargeBinary(), nullable=True),
        sa.Column("created_at", _utc(), nullable=False),
        sa.Column("destroyed_at", _utc(), nullable=True),
        sa.Column("destroyed_by_request", ID, nullable=True),
        sa.PrimaryKeyConstraint("key_id", name=op.f("pk_data_keys")),
    )
    op.create_index(op.f("ix_data_keys_subject_id"), "data_keys", ["subject_id"])
    op.create_table(
        "raw_payloads",
        sa.Column("raw_id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=True),
        sa.Column("sanitized_hash", DIGEST, nullable=False),
        sa.Column("raw_hash", DIGEST, nullable=False),
        sa.Column("redaction_policy_version", sa.String(length=64), nullable=False),
        sa.Column("subject_id", ID, nullable=True),
        sa.Column("key_id", ID, nullable=True),
        sa.Column("ciphertext", sa.LargeBinary(), nullable=True),
        sa.Column("ciphertext_ref", sa.String(length=1024), nullable=True),
        sa.Column("created_at", _utc(), nullable=False),
        sa.Column("destroyed_at", _utc(), nullable=True),
        sa.Column("destroyed_by_request", ID, nullable=True),
        sa.PrimaryKeyConstraint("raw_id", name=op.f("pk_raw_payloads")),
    )
    op.create_index(op.f("ix_raw_payloads_run_id"), "raw_payloads", ["run_id"])
    op.create_index(op.f("ix_raw_payloads_subject_id"), "raw_payloads", ["subject_id"])
    op.create_table(
        "run_subjects",
        sa.Column("run_id", ID, nullable=False),
        sa.Column("subject_id", ID, nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("source", sa.String(length=255), nullable=False),
        sa.Column("is_primary", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "subject_id", name=op.f("pk_run_subjects")),
    )
    op.create_index("ix_run_subjects_subject", "run_subjects", ["subject_id"])
    op.create_table(
        "privacy_audit",
        sa.Column("audit_id", ID, nullable=False),
        sa.Column("at", _utc(), nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("record", _json(), nullable=False),
        sa.PrimaryKeyConstraint("audit_id", name=op.f("pk_privacy_audit")),
    )
    op.create_index(op.f("ix_privacy_audit_at"), "privacy_audit", ["at"])
    op.create_table(
        "legal_holds",
        sa.Column("hold_id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("placed_at", _utc(), nullable=False),
        sa.Column("until", _utc(), nullable=True),
        sa.Column("released_at", _utc(), nullable=True),
        sa.Column("record", _json(), nullable=False),
        sa.PrimaryKeyConstraint("hold_id", name=op.f("pk_legal_holds")),
    )
    op.create_index(op.f("ix_legal_holds_run_id"), "legal_holds", ["run_id"])
    op.create_table(
        "deletion_receipts",
        sa.Column("request_id", ID, nullable=False),
        sa.Column("subject_id", ID, nullable=False),
        sa.Column("executed_at", _utc(), nullable=False),
        sa.Column("record", _json(), nullable=False),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_deletion_receipts")),
    )
    op.create_index(op.f("ix_deletion_receipts_subject_id"), "deletion_receipts", ["subject_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_deletion_receipts_subject_id"), table_name="deletion_receipts")
    op.drop_table("deletion_receipts")
    op.drop_index(op.f("ix_legal_holds_run_id"), table_name="legal_holds")
    op.drop_table("legal_holds")
    op.drop_index(op.f("ix_privacy_audit_at"), table_name="privacy_audit")
    op.drop_table("privacy_audit")
    op.drop_index("ix_run_subjects_subject", table_name="run_subjects")
    op.drop_table("run_subjects")
    op.drop_index(op.f("ix_raw_payloads_subject_id"), table_name="raw_payloads")
    op.drop_index(op.f("ix_raw_payloads_run_id"), table_name="raw_payloads")
    op.drop_table("raw_payloads")
    op.drop_index(op.f("ix_data_keys_subject_id"), table_name="data_keys")
    op.drop_table("data_keys")

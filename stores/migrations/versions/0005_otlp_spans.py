"""otlp spans: the staging tables of the OTLP/HTTP receiver (POST /v1/traces)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

Each export is stored here as one row (its protobuf body, keyed by its digest) before it is
answered, then indexed: its spans once by trace and span id, its traces' states; a trace is
assembled into a run from them once its root span arrived (or after an idle timeout).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _utc() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "otlp_traces",
        sa.Column("trace_id", sa.String(length=32), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("has_root", sa.Boolean(), nullable=False),
        sa.Column("first_seen", _utc(), nullable=False),
        sa.Column("last_seen", _utc(), nullable=False),
        sa.Column("claimed_at", _utc(), nullable=True),
        sa.Column("ended_by", sa.String(length=32), nullable=True),
        sa.Column("run_id", sa.String(length=512), nullable=True),
        sa.Column("error", sa.String(), nullable=True),
        sa.PrimaryKeyConstraint("trace_id", name=op.f("pk_otlp_traces")),
    )
    op.create_index("ix_otlp_traces_state", "otlp_traces", ["state", "last_seen"])
    op.create_table(
        "otlp_exports",
        sa.Column(
            "export_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("received_at", _utc(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("span_ids", sa.String(), nullable=False),
        sa.Column("roots", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("export_id", name=op.f("pk_otlp_exports")),
        sa.UniqueConstraint("digest", name=op.f("uq_otlp_exports_digest")),
    )
    op.create_table(
        "otlp_pending_exports",
        sa.Column(
            "export_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=False,
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("export_id", name=op.f("pk_otlp_pending_exports")),
    )
    op.create_table(
        "otlp_spans",
        sa.Column("trace_id", sa.String(length=32), nullable=False),
        sa.Column("export_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("span_ids", sa.String(), nullable=False),
        sa.Column("late", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("trace_id", "export_id", name=op.f("pk_otlp_spans")),
    )


def downgrade() -> None:
    op.drop_table("otlp_spans")
    op.drop_table("otlp_pending_exports")
    op.drop_table("otlp_exports")
    op.drop_index("ix_otlp_traces_state", table_name="otlp_traces")
    op.drop_table("otlp_traces")

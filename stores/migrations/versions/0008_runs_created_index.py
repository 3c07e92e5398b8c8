"""runs listed newest first: an index on (created_at descending, run_id)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

The web console's runs page (a keyset page, ``stores.sql.run_pages``) and ``GET /api/runs``
order runs by ``created_at`` descending then ``run_id``: with the index a page reads its own
rows instead of sorting every run.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_runs_created", "runs", [sa.text("created_at DESC"), "run_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_runs_created", table_name="runs")

"""Read-side queries behind the run views (``runs show``, ``GET /runs/{id}``) and behind the
side-effect retry: plain records, no rendering."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import select

from stores.sql import schema
from stores.sql.database import Database

__all__ = ["RUN_EVIDENCE_TABLES", "SqlRunViews"]

#: the evidence tables recorded beside a run's events, in the order a run view lists them
RUN_EVIDENCE_TABLES = (
    schema.tool_fixtures,
    schema.prompt_artifacts,
    schema.context_snapshots,
    schema.retrieval_fixtures,
    schema.policy_decisions,
    schema.approvals,
    schema.side_effects,
    schema.checkpoints,
)


def _record(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else json.loads(value)


class SqlRunViews:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def run_evidence(self, run_id: str) -> dict[str, list[dict[str, Any]]]:
        """Table name -> the run's stored records in that table, in recording order."""
        evidence: dict[str, list[dict[str, Any]]] = {}
        async with self.db.read() as conn:
            for table in RUN_EVIDENCE_TABLES:
                query = (
                    select(table.c.record)
                    .where(table.c.run_id == run_id)
                    .order_by(table.c.sequence)
                )
                evidence[table.name] = [row.record for row in (await conn.execute(query)).all()]
        return evidence

    async def policy_decisions(self, run_id: str) -> list[tuple[int, dict[str, Any]]]:
        """The run's policy decisions as (event sequence, stored record), in recording order."""
        table = schema.policy_decisions
        query = (
            select(table.c.sequence, table.c.record)
            .where(table.c.run_id == run_id)
            .order_by(table.c.sequence)
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [(int(row.sequence), _record(row.record)) for row in rows]

    async def runs_of_graph_since(
        self, graph_id: str, since: datetime | None, *, limit: int = 200
    ) -> list[dict[str, Any]]:
        """Headers (``RunRecord`` as stored) of the graph's runs created at or after ``since``
        (all when None), oldest first, at most ``limit``: what a recurrence watch judges."""
        r = schema.runs.c
        query = select(r.record).where(r.graph_id == graph_id)
        if since is not None:
            query = query.where(r.created_at >= since)
        query = query.order_by(r.created_at, r.run_id).limit(limit)
        async with self.db.read() as conn:
            return [_record(row.record) for row in (await conn.execute(query)).all()]


async def run_labels(db: Database, run_ids: list[str]) -> dict[str, dict[str, str]]:
    """Each run's labels (``RunRecord.labels``), for the runs named, in one query."""
    if not run_ids:
        return {}
    r = schema.runs.c
    query = select(r.run_id, r.record).where(r.run_id.in_(run_ids))
    async with db.read() as conn:
        rows = (await conn.execute(query)).all()
    return {row.run_id: dict(_record(row.record).get("labels") or {}) for row in rows}

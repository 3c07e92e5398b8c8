"""Keyset pages of recorded runs for the web console (``/ui/runs``): newest first, filtered by
graph, outcome (run status) and date, one page per query whatever the number of runs, plus the
per-row facts a page shows (chain head, side effects by state) in one query each."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, or_, select

from stores.sql import schema
from stores.sql.database import Database, utc


@dataclass(frozen=True)
class RunRow:
    run_id: str
    graph_id: str
    graph_version: str
    status: str
    created_at: datetime
    head_sequence: int
    head_hash: str
    labels: dict[str, str]


@dataclass(frozen=True)
class RunFilter:
    graph_id: str | None = None
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None


async def runs_after(
    db: Database, where: RunFilter, after: tuple[datetime, str] | None, limit: int
) -> list[RunRow]:
    """At most ``limit`` runs matching ``where``, newest first (``created_at`` descending, then
    ``run_id``), strictly after the keyset position ``after`` (the last row of the page
    before)."""
    r = schema.runs.c
    # the page's ids first, ordered on the two keys alone: the sort then carries no record
    # (the JSON column, read afterwards for the page's rows only)
    page = select(r.run_id)
    if where.graph_id:
        page = page.where(r.graph_id == where.graph_id)
    if where.status:
        page = page.where(r.status == where.status)
    if where.since is not None:
        page = page.where(r.created_at >= where.since)
    if where.until is not None:
        page = page.where(r.created_at < where.until)
    if after is not None:
        at, run_id = after
        page = page.where(or_(r.created_at < at, and_(r.created_at == at, r.run_id > run_id)))
    page = page.order_by(r.created_at.desc(), r.run_id).limit(limit)
    query = (
        select(
            r.run_id,
            r.graph_id,
            r.graph_version,
            r.status,
            r.created_at,
            r.head_sequence,
            r.head_hash,
            r.record,
        )
        .where(r.run_id.in_(page.scalar_subquery()))
        .order_by(r.created_at.desc(), r.run_id)
    )
    async with db.read() as conn:
        rows = (await conn.execute(query)).all()
    return [
        RunRow(
            row.run_id,
            row.graph_id,
            row.graph_version,
            row.status,
            utc(row.created_at),
            int(row.head_sequence),
            row.head_hash,
            dict(_record(row.record).get("labels") or {}),
        )
        for row in rows
    ]


async def chain_heads(db: Database, run_ids: list[str]) -> dict[str, tuple[int, str]]:
    """Each run's last stored event: (sequence, hash), for the runs named, in one query."""
    if not run_ids:
        return {}
    e = schema.execution_events.c
    last = (
        select(e.run_id, func.max(e.sequence).label("sequence"))
        .where(e.run_id.in_(run_ids))
        .group_by(e.run_id)
        .subquery()
    )
    query = select(e.run_id, e.sequence, e.hash).join(
        last, and_(e.run_id == last.c.run_id, e.sequence == last.c.sequence)
    )
    async with db.read() as conn:
        rows = (await conn.execute(query)).all()
    return {row.run_id: (int(row.sequence), row.hash) for row in rows}


async def side_effect_states(db: Database, run_ids: list[str]) -> dict[str, dict[str, int]]:
    """Each run's side effects counted by state, for the runs named, in one query."""
    if not run_ids:
        return {}
    s = schema.side_effects.c
    query = (
        select(s.run_id, s.status, func.count().label("n"))
        .where(s.run_id.in_(run_ids))
        .group_by(s.run_id, s.status)
    )
    async with db.read() as conn:
        rows = (await conn.execute(query)).all()
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        out.setdefault(row.run_id, {})[row.status] = int(row.n)
    return out


async def graph_ids(db: Database) -> list[str]:
    """The graphs runs were recorded with (the filter's choices)."""
    r = schema.runs.c
    async with db.read() as conn:
        rows = (await conn.execute(select(r.graph_id).distinct().order_by(r.graph_id))).all()
    return [row.graph_id for row in rows]


def _record(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else json.loads(value)

"""The OTLP receiver's staging tables: spans stored on arrival (deduplicated by trace and span
id) before an export is answered, and the state of each trace on its way to a run.

Writers of one trace serialise on its ``otlp_traces`` row: an export upserts the row first
(PostgreSQL locks it; SQLite has one writer), so a claim and the spans of a concurrent export
are ordered — the spans are either in the claimed set or marked ``late``, never lost between.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from runtime.ports import StagedSpan, StageOutcome
from stores.sql import schema
from stores.sql.database import Database

T = schema.otlp_traces
S = schema.otlp_spans
OPEN, ASSEMBLING, ASSEMBLED, FAILED = "open", "assembling", "assembled", "failed"


def _insert(conn: AsyncConnection, table: Any) -> Any:
    return (pg_insert if conn.dialect.name == "postgresql" else sqlite_insert)(table)


class SqlOtlpSpans:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def stage(self, spans: Sequence[StagedSpan], now: datetime) -> StageOutcome:
        unique = {(s.trace_id, s.span_id): s for s in spans}
        traces = sorted({s.trace_id for s in unique.values()})  # one lock order for all
        if not traces:
            return StageOutcome()
        rooted = {s.trace_id for s in unique.values() if s.parent_span_id is None}
        async with self.db.transaction() as conn:
            states = await self._touch(conn, traces, rooted, now)
            known = await self._known(conn, traces)
            new = [s for key, s in unique.items() if key not in known]
            late = [s for s in new if states[s.trace_id][0] != OPEN]
            if new:
                await conn.execute(
                    _insert(conn, S).on_conflict_do_nothing(index_elements=["trace_id", "span_id"]),
                    [
                        {
                            "trace_id": s.trace_id,
                            "span_id": s.span_id,
                            "parent_span_id": s.parent_span_id,
                            "received_at": now,
                            "late": states[s.trace_id][0] != OPEN,
                            "service": s.service,
                            "write_tools": s.write_tools,
                            "span": s.data,
                        }
                        for s in new
                    ],
                )
        return StageOutcome(
            accepted=len(new) - len(late),
            duplicates=len(spans) - len(new),
            late=len(late),
            late_traces={s.trace_id: states[s.trace_id][1] for s in late},
            rooted=tuple(t for t in traces if states[t][0] == OPEN and states[t][2]),
        )

    async def _touch(
        self, conn: AsyncConnection, traces: list[str], rooted: set[str], now: datetime
    ) -> dict[str, tuple[str, str | None, bool]]:
        """Upsert the traces' rows (taking their locks); trace id → (state, run id, has root)."""
        statement = _insert(conn, T).values(
            [
                {
                    "trace_id": t,
                    "state": OPEN,
                    "has_root": t in rooted,
                    "first_seen": now,
                    "last_seen": now,
                }
                for t in traces
            ]
        )
        statement = statement.on_conflict_do_update(
            index_elements=["trace_id"],
            set_={
                "last_seen": statement.excluded.last_seen,
                "has_root": or_(T.c.has_root, statement.excluded.has_root),
            },
        ).returning(T.c.trace_id, T.c.state, T.c.run_id, T.c.has_root)
        rows = (await conn.execute(statement)).all()
        return {r.trace_id: (r.state, r.run_id, bool(r.has_root)) for r in rows}

    async def _known(self, conn: AsyncConnection, traces: list[str]) -> set[tuple[str, str]]:
        rows = await conn.execute(select(S.c.trace_id, S.c.span_id).where(S.c.trace_id.in_(traces)))
        return {(r.trace_id, r.span_id) for r in rows}

    async def claim(
        self, trace_id: str, ended_by: str, now: datetime, stale_before: datetime
    ) -> str | None:
        async with self.db.transaction() as conn:
            claimed = await conn.execute(
                update(T)
                .where(
                    T.c.trace_id == trace_id,
                    or_(
                        T.c.state == OPEN,
                        and_(T.c.state == ASSEMBLING, T.c.claimed_at < stale_before),
                    ),
                )
                .values(
                    state=ASSEMBLING,
                    claimed_at=now,
                    ended_by=func.coalesce(T.c.ended_by, ended_by),
                )
            )
            if claimed.rowcount != 1:
                return None
            row = (await conn.execute(select(T.c.ended_by).where(T.c.trace_id == trace_id))).one()
            return str(row.ended_by)

    async def spans(self, trace_id: str) -> list[StagedSpan]:
        query = (
            select(
                S.c.trace_id,
                S.c.span_id,
                S.c.parent_span_id,
                S.c.service,
                S.c.span,
                S.c.write_tools,
            )
            .where(S.c.trace_id == trace_id, S.c.late.is_(False))
            .order_by(S.c.span_id)
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [
            StagedSpan(
                r.trace_id, r.span_id, r.parent_span_id, r.service, bytes(r.span), r.write_tools
            )
            for r in rows
        ]

    async def finish(
        self, trace_id: str, state: str, run_id: str | None, error: str | None = None
    ) -> None:
        async with self.db.transaction() as conn:
            await conn.execute(
                update(T)
                .where(T.c.trace_id == trace_id)
                .values(state=state, run_id=run_id, error=error)
            )

    async def due(
        self, idle_before: datetime, stale_before: datetime, limit: int = 100
    ) -> list[tuple[str, str]]:
        idle = and_(T.c.state == OPEN, T.c.last_seen < idle_before)
        stale = and_(T.c.state == ASSEMBLING, T.c.claimed_at < stale_before)
        query = (
            select(T.c.trace_id, idle.label("idle"), stale.label("stale"))
            .where(or_(and_(T.c.state == OPEN, T.c.has_root.is_(True)), idle, stale))
            .order_by(T.c.last_seen)
            .limit(limit)
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [(r.trace_id, "idle" if r.idle else "stale" if r.stale else "rooted") for r in rows]

    async def state(self, trace_id: str) -> dict[str, Any] | None:
        async with self.db.read() as conn:
            row = (await conn.execute(select(T).where(T.c.trace_id == trace_id))).first()
        return dict(row._mapping) if row is not None else None

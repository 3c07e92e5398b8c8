"""The OTLP receiver's staging tables: spans stored on arrival, a chunk per trace and export
(a span already stored is not stored again), before an export is answered, and the state of
each trace on its way to a run.

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

from runtime.ports import StagedChunk, StageOutcome
from stores.sql import schema
from stores.sql.database import Database

T = schema.otlp_traces
C = schema.otlp_span_chunks
OPEN, ASSEMBLING, ASSEMBLED, FAILED = "open", "assembling", "assembled", "failed"


def _insert(conn: AsyncConnection, table: Any) -> Any:
    return (pg_insert if conn.dialect.name == "postgresql" else sqlite_insert)(table)


class SqlOtlpSpans:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def stage(self, chunks: Sequence[StagedChunk], now: datetime) -> StageOutcome:
        traces = sorted({c.trace_id for c in chunks})  # one lock order for every writer
        if not traces:
            return StageOutcome()
        rooted = {c.trace_id for c in chunks if c.has_root}
        accepted = duplicates = late = 0
        late_traces: dict[str, str | None] = {}
        rows = []
        async with self.db.transaction() as conn:
            states = await self._touch(conn, traces, rooted, now)
            # a trace first seen by this export has nothing stored to compare with
            known = await self._known(conn, [t for t in traces if not states[t][3]])
            for chunk in chunks:
                seen = known.setdefault(chunk.trace_id, set())
                new = [k for k, i in enumerate(chunk.span_ids) if i not in seen]
                duplicates += len(chunk.span_ids) - len(new)
                if not new:
                    continue  # everything in it is stored already: nothing to keep twice
                seen.update(chunk.span_ids[k] for k in new)
                is_late = states[chunk.trace_id][0] != OPEN
                if is_late:
                    late += len(new)
                    late_traces[chunk.trace_id] = states[chunk.trace_id][1]
                else:
                    accepted += len(new)
                rows.append(
                    {
                        "trace_id": chunk.trace_id,
                        "span_ids": ",".join(chunk.span_ids[k] for k in new),
                        "received_at": now,
                        "late": is_late,
                        "service": chunk.service,
                        "write_tools": chunk.write_tools,
                        "spans": b"".join(chunk.parts[k] for k in new),
                    }
                )
            if rows:
                await conn.execute(C.insert(), rows)
        return StageOutcome(
            accepted=accepted,
            duplicates=duplicates,
            late=late,
            late_traces=late_traces,
            rooted=tuple(t for t in traces if states[t][0] == OPEN and states[t][2]),
        )

    async def _touch(
        self, conn: AsyncConnection, traces: list[str], rooted: set[str], now: datetime
    ) -> dict[str, tuple[str, str | None, bool, bool]]:
        """Upsert the traces' rows, taking their locks; trace id → (state, run id, has root,
        first seen now). One statement for all (many parameter sets, the rows returned)."""
        statement = _insert(conn, T)
        statement = statement.on_conflict_do_update(
            index_elements=["trace_id"],
            set_={
                "last_seen": statement.excluded.last_seen,
                "has_root": or_(T.c.has_root, statement.excluded.has_root),
            },
        ).returning(
            T.c.trace_id,
            T.c.state,
            T.c.run_id,
            T.c.has_root,
            # a new row: first seen when last seen (no datetime parsed back)
            (T.c.first_seen == T.c.last_seen).label("new"),
        )
        rows = await conn.execute(
            statement,
            [
                {
                    "trace_id": t,
                    "state": OPEN,
                    "has_root": t in rooted,
                    "first_seen": now,
                    "last_seen": now,
                    "claimed_at": None,
                    "ended_by": None,
                    "run_id": None,
                    "error": None,
                }
                for t in traces
            ],
        )
        return {r.trace_id: (r.state, r.run_id, bool(r.has_root), bool(r.new)) for r in rows}

    async def _known(self, conn: AsyncConnection, traces: list[str]) -> dict[str, set[str]]:
        """The span ids stored of each trace (late ones too)."""
        if not traces:
            return {}
        query = select(C.c.trace_id, C.c.span_ids).where(C.c.trace_id.in_(traces))
        known: dict[str, set[str]] = {}
        for row in await conn.execute(query):
            known.setdefault(row.trace_id, set()).update(row.span_ids.split(","))
        return known

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

    async def chunks(self, trace_id: str) -> list[StagedChunk]:
        query = (
            select(C.c.span_ids, C.c.service, C.c.write_tools, C.c.spans)
            .where(C.c.trace_id == trace_id, C.c.late.is_(False))
            .order_by(C.c.chunk_id)
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [
            StagedChunk(
                trace_id=trace_id,
                span_ids=tuple(r.span_ids.split(",")),
                has_root=False,  # not kept per chunk: the trace's row knows
                service=r.service,
                write_tools=r.write_tools,
                parts=(bytes(r.spans),),
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

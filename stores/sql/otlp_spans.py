"""The OTLP receiver's staging tables: each export stored on arrival as ONE row (its protobuf
body), its spans indexed by trace and span id (a span already indexed is not indexed again),
before the export is answered; and the state of each trace on its way to a run.

Every multi-row statement binds one parameter (a JSON array on SQLite, read by ``json_each``;
a PostgreSQL array, read by ``unnest``), so storing an export is five statements whatever its
size, not a parameter set per span or trace.

Writers of one trace serialise on its ``otlp_traces`` row: an export upserts the row first
(PostgreSQL locks it; SQLite has one writer), so a claim and the spans of a concurrent export
are ordered — the spans are either in the claimed set or marked ``late``, never lost between.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, and_, bindparam, delete, func, or_, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from runtime.ports import StagedExport, StageOutcome, StoredExport
from stores.sql import schema
from stores.sql.database import Database

T = schema.otlp_traces
E = schema.otlp_exports
S = schema.otlp_spans
OPEN, ASSEMBLING, ASSEMBLED, FAILED = "open", "assembling", "assembled", "failed"


def _touch_sql(postgresql: bool) -> Any:
    """Upsert the export's traces (taking their locks, in the order given), returning each
    trace's state, run and whether its root arrived."""
    if postgresql:
        source = (
            "SELECT t, 'open', r, :now, :now FROM unnest(CAST(:traces AS text[]), "
            "CAST(:roots AS boolean[])) AS u(t, r)"
        )
    else:
        source = (
            "SELECT json_extract(value, '$[0]'), 'open', json_extract(value, '$[1]'), :now, :now "
            "FROM json_each(:traces) "
            "WHERE true"
        )
    statement = text(
        "INSERT INTO otlp_traces (trace_id, state, has_root, first_seen, last_seen) "
        f"{source} ON CONFLICT (trace_id) DO UPDATE SET last_seen = excluded.last_seen, "
        "has_root = otlp_traces.has_root OR excluded.has_root "
        "RETURNING trace_id, state, run_id, has_root"
    )
    return statement.bindparams(bindparam("now", type_=DateTime(timezone=True)))


def _index_sql(postgresql: bool, returning: bool) -> Any:
    """Index spans (``trace id`` + ``span id`` in hex, 48 digits each) under an export;
    a span indexed already is left as it is."""
    if postgresql:
        rows = "unnest(CAST(:ids AS text[])) AS u(value)"
    else:
        rows = "json_each(:ids) WHERE true"
    return text(
        "INSERT INTO otlp_spans (trace_id, span_id, export_id, late) "
        f"SELECT substr(value, 1, 32), substr(value, 33), :export, :late FROM {rows} "
        "ON CONFLICT (trace_id, span_id) DO NOTHING" + (" RETURNING trace_id" if returning else "")
    )


def _bound(conn: AsyncConnection, values: list[Any]) -> Any:
    """A list bound as one parameter: a PostgreSQL array, or JSON text for SQLite's json_each."""
    return values if conn.dialect.name == "postgresql" else json.dumps(values)


class SqlOtlpSpans:
    def __init__(self, db: Database) -> None:
        self.db = db
        pg = db.is_postgresql
        self._touch_sql = _touch_sql(pg)
        self._index_sql = _index_sql(pg, returning=False)
        self._index_late_sql = _index_sql(pg, returning=True)

    async def stage(self, export: StagedExport, now: datetime) -> StageOutcome:
        traces = sorted(export.spans)  # one lock order for every writer
        if not traces:
            return StageOutcome()
        async with self.db.transaction() as conn:
            states = await self._touch(conn, traces, export.rooted, now)
            export_id = (
                await conn.execute(
                    E.insert().values(received_at=now, body=export.body).returning(E.c.export_id)
                )
            ).scalar_one()
            open_ids = [t + s for t in traces if states[t][0] == OPEN for s in export.spans[t]]
            closed = [t for t in traces if states[t][0] != OPEN]
            accepted = late = 0
            late_traces: dict[str, str | None] = {}
            if open_ids:
                indexed = await conn.execute(
                    self._index_sql,
                    {"ids": _bound(conn, open_ids), "export": export_id, "late": False},
                )
                accepted = indexed.rowcount
            if closed:
                ids = [t + s for t in closed for s in export.spans[t]]
                params = {"ids": _bound(conn, ids), "export": export_id, "late": True}
                for row in await conn.execute(self._index_late_sql, params):
                    late += 1
                    late_traces[row.trace_id] = states[row.trace_id][1]
            if not accepted and not late:  # nothing new in it: not kept
                await conn.execute(delete(E).where(E.c.export_id == export_id))
        total = sum(len(ids) for ids in export.spans.values())
        return StageOutcome(
            accepted=accepted,
            duplicates=total - accepted - late,
            late=late,
            late_traces=late_traces,
            rooted=tuple(t for t in traces if states[t][0] == OPEN and states[t][2]),
        )

    async def _touch(
        self, conn: AsyncConnection, traces: list[str], rooted: frozenset[str], now: datetime
    ) -> dict[str, tuple[str, str | None, bool]]:
        """Upsert the traces' rows, taking their locks; trace id → (state, run id, has root)."""
        if conn.dialect.name == "postgresql":
            params = {"traces": traces, "roots": [t in rooted for t in traces], "now": now}
        else:
            params = {"traces": json.dumps([[t, t in rooted] for t in traces]), "now": now}
        rows = await conn.execute(self._touch_sql, params)
        return {r.trace_id: (r.state, r.run_id, bool(r.has_root)) for r in rows}

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

    async def exports(self, trace_id: str) -> list[StoredExport]:
        spans = (
            select(S.c.export_id, S.c.span_id)
            .where(S.c.trace_id == trace_id, S.c.late.is_(False))
            .order_by(S.c.export_id)
        )
        async with self.db.read() as conn:
            ids: dict[int, set[str]] = {}
            for row in await conn.execute(spans):
                ids.setdefault(row.export_id, set()).add(row.span_id)
            if not ids:
                return []
            bodies = select(E.c.export_id, E.c.body).where(E.c.export_id.in_(list(ids)))
            rows = (await conn.execute(bodies.order_by(E.c.export_id))).all()
        return [StoredExport(bytes(r.body), frozenset(ids[r.export_id])) for r in rows]

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

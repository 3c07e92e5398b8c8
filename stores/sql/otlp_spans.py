"""The OTLP receiver's staging tables: each export stored on arrival as ONE row before it is
answered, its spans indexed by trace and span id after the answer, and the state of each trace
on its way to a run.

The request's path writes the export's row (its protobuf body, its span ids and the traces it
roots, keyed by the body's digest: an export sent twice is stored once) and a row in
``otlp_pending_exports``; nothing keyed by a random id is written there (a span index keyed by
random ids touches a page per span in every commit). ``index`` (the assembly loop, soon after)
moves the pending exports into ``otlp_traces`` and ``otlp_spans`` in one transaction: a span
already indexed is left as it was (its first export keeps it), a span of a claimed trace is
marked late, and an export that brought no new span is deleted.

Ordering. An export whose traces are all open is stored pending; a claim indexes every pending
export first, in the transaction that freezes the trace, so what was acknowledged before a
claim is in the run. An export with a span of a claimed trace is indexed at once, exactly (the
late spans are named in its answer). Exports and claims are serialised: SQLite has one writer;
PostgreSQL exports take a shared advisory lock and indexing an exclusive one, so no export is
between its check and its commit while pending exports are indexed.

Every multi-row statement binds one parameter (a JSON array on SQLite, read by ``json_each``;
a PostgreSQL array, read by ``unnest``), not a parameter set per span or trace.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client import Counter
from sqlalchemy import and_, delete, func, or_, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from runtime.ports import StagedExport, StageOutcome, StoredExport
from stores.sql import schema
from stores.sql.database import Database, utc
from stores.sql.otlp_writer import CLOSED, sqlite_export_writer

T = schema.otlp_traces
E = schema.otlp_exports
P = schema.otlp_pending_exports
S = schema.otlp_spans
OPEN, ASSEMBLING, ASSEMBLED, FAILED = "open", "assembling", "assembled", "failed"
#: PostgreSQL advisory lock: exports hold it shared, indexing exclusively ("OTLP")
_INDEX_LOCK = 0x4F544C50
_TRACE_HEX, _SPAN_HEX = 32, 16

SPANS_TOTAL = Counter(
    "replaybook_otlp_spans",
    "Spans received at POST /v1/traces, by result once indexed: accepted (new), duplicate "
    "(stored already), late (arrived after their trace was assembled: kept, refused).",
    ["result"],
)


def _count(outcome: StageOutcome) -> None:
    SPANS_TOTAL.labels("accepted").inc(outcome.accepted)
    SPANS_TOTAL.labels("duplicate").inc(outcome.duplicates)
    SPANS_TOTAL.labels("late").inc(outcome.late)


def _touch_sql(postgresql: bool) -> Any:
    """Upsert traces (taking their locks, in the order given), each seen at its time,
    returning each trace's state and run."""
    if postgresql:
        source = (
            "SELECT t, 'open', r, s, s FROM unnest(CAST(:traces AS text[]), "
            "CAST(:roots AS boolean[]), CAST(:seen AS timestamptz[])) AS u(t, r, s)"
        )
        latest = "greatest(otlp_traces.last_seen, excluded.last_seen)"
    else:
        source = (
            "SELECT json_extract(value, '$[0]'), 'open', json_extract(value, '$[1]'), "
            "json_extract(value, '$[2]'), json_extract(value, '$[2]') "
            "FROM json_each(:traces) WHERE true"
        )
        latest = "max(otlp_traces.last_seen, excluded.last_seen)"
    return text(
        "INSERT INTO otlp_traces (trace_id, state, has_root, first_seen, last_seen) "
        f"{source} ON CONFLICT (trace_id) DO UPDATE SET last_seen = {latest}, "
        "has_root = otlp_traces.has_root OR excluded.has_root "
        "RETURNING trace_id, state, run_id"
    )


def _insert_spans_sql(postgresql: bool) -> Any:
    """``otlp_spans`` rows: (trace id, export id, span ids, late)."""
    if postgresql:
        source = (
            "SELECT * FROM unnest(CAST(:traces AS text[]), CAST(:exports AS bigint[]), "
            "CAST(:ids AS text[]), CAST(:lates AS boolean[]))"
        )
    else:
        source = (
            "SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), "
            "json_extract(value, '$[2]'), json_extract(value, '$[3]') FROM json_each(:rows)"
        )
    return text(f"INSERT INTO otlp_spans (trace_id, export_id, span_ids, late) {source}")


def _columns(conn: AsyncConnection, rows: list[tuple[str, int, str, bool]]) -> dict[str, Any]:
    if conn.dialect.name != "postgresql":
        return {"rows": json.dumps(rows)}
    traces, exports, ids, lates = (list(c) for c in zip(*rows, strict=True))
    return {"traces": traces, "exports": exports, "ids": ids, "lates": lates}


def _among(postgresql: bool) -> str:
    """``trace_id`` among the bound list ``:traces``."""
    if postgresql:
        return "trace_id = ANY(CAST(:traces AS text[]))"
    return "trace_id IN (SELECT value FROM json_each(:traces))"


def _bound(conn: AsyncConnection, values: list[Any]) -> Any:
    """A list bound as one parameter: a PostgreSQL array, or JSON text for SQLite's json_each."""
    return values if conn.dialect.name == "postgresql" else json.dumps(values)


def _row(export: StagedExport, now: datetime, *, digest: bool = True) -> dict[str, Any]:
    """The export's ``otlp_exports`` row but its id (and its digest unless ``digest`` is
    false: the SQLite writer hashes the body on its thread)."""
    return {
        **({"digest": hashlib.sha256(export.body).hexdigest()} if digest else {}),
        "received_at": now,
        "body": export.body,
        "span_ids": "".join(t + s for t, ids in export.spans.items() for s in ids),
        "roots": "".join(sorted(export.rooted)),
    }


def _split(joined: str, width: int) -> list[str]:
    return [joined[k : k + width] for k in range(0, len(joined), width)]


@dataclass(frozen=True)
class _Export:
    """A stored export to index: its spans by trace, the traces it roots."""

    export_id: int
    received_at: datetime
    spans: dict[str, list[str]]
    roots: frozenset[str]


class SqlOtlpSpans:
    def __init__(self, db: Database) -> None:
        self.db = db
        pg = db.is_postgresql
        self._touch_sql = _touch_sql(pg)
        self._insert_spans_sql = _insert_spans_sql(pg)
        self._known_sql = text(f"SELECT trace_id, span_ids FROM otlp_spans WHERE {_among(pg)}")
        self._closed_sql = text(
            f"SELECT trace_id FROM otlp_traces WHERE {_among(pg)} AND state <> 'open'"
        )

    @asynccontextmanager
    async def _locked(self, exclusive: bool) -> AsyncIterator[AsyncConnection]:
        """A write transaction holding the index lock (see the module docstring)."""
        async with self.db.transaction() as conn:
            if self.db.is_postgresql:
                how = "" if exclusive else "_shared"
                await conn.execute(text(f"SELECT pg_advisory_xact_lock{how}({_INDEX_LOCK})"))
            yield conn

    async def stage(self, export: StagedExport, now: datetime) -> StageOutcome:
        total = sum(len(ids) for ids in export.spans.values())
        if not total:
            return StageOutcome()
        traces = sorted(export.spans)
        stored = await self._store_pending(traces, export, now)
        if stored is None:  # the same export is stored already
            outcome = StageOutcome(duplicates=total)
            _count(outcome)
            return outcome
        if stored != CLOSED:  # the common case: stored, indexed after the answer
            return StageOutcome(pending=total, rooted=tuple(sorted(export.rooted)))
        # a trace of it is claimed already: indexed now, so its answer names the late spans
        async with self._locked(exclusive=True) as conn:
            await self._index_pending(conn)
            export_id = await self._insert_export(conn, export, now, pending=False)
            if export_id is None:
                outcome = StageOutcome(duplicates=total)
            else:
                outcome = await self._index(
                    conn, [_Export(export_id, now, export.spans, export.rooted)]
                )
        _count(outcome)
        return outcome

    async def _store_pending(
        self, traces: list[str], export: StagedExport, now: datetime
    ) -> int | None:
        """The export stored for indexing later: its id; None when the same body is stored
        already; ``CLOSED`` when a trace of it is no longer open (nothing written)."""
        if not self.db.is_postgresql:  # one hand-off to the writer's thread
            async with self.db._writer():
                row = _row(export, now, digest=False)
                return await sqlite_export_writer(self.db).store(traces, row)
        async with self._locked(exclusive=False) as conn:
            closed = await conn.execute(self._closed_sql, {"traces": traces})
            if closed.first() is not None:
                return CLOSED
            return await self._insert_export(conn, export, now, pending=True)

    async def _insert_export(
        self, conn: AsyncConnection, export: StagedExport, now: datetime, *, pending: bool
    ) -> int | None:
        """The export's row (and its pending mark); None when the same body is stored."""
        statement = (pg_insert if conn.dialect.name == "postgresql" else sqlite_insert)(E)
        export_id = (
            await conn.execute(
                statement.on_conflict_do_nothing(index_elements=["digest"])
                .values(**_row(export, now))
                .returning(E.c.export_id)
            )
        ).scalar_one_or_none()
        if export_id is None:
            return None
        if pending:
            await conn.execute(P.insert().values(export_id=export_id))
        return int(export_id)

    async def index(self) -> StageOutcome:
        async with self._locked(exclusive=True) as conn:
            outcome = await self._index_pending(conn)
        _count(outcome)
        return outcome

    async def _index_pending(self, conn: AsyncConnection) -> StageOutcome:
        """Index every pending export, in the order they arrived; what it did in sum."""
        query = (
            select(E.c.export_id, E.c.received_at, E.c.span_ids, E.c.roots)
            .join(P, P.c.export_id == E.c.export_id)
            .order_by(E.c.export_id)
        )
        pending = []
        for row in await conn.execute(query):
            spans: dict[str, list[str]] = {}
            for record in _split(row.span_ids, _TRACE_HEX + _SPAN_HEX):
                spans.setdefault(record[:_TRACE_HEX], []).append(record[_TRACE_HEX:])
            roots = frozenset(_split(row.roots, _TRACE_HEX))
            pending.append(_Export(row.export_id, utc(row.received_at), spans, roots))
        if not pending:
            return StageOutcome()
        outcome = await self._index(conn, pending)
        ids = [e.export_id for e in pending]
        await conn.execute(delete(P).where(P.c.export_id.in_(ids)))
        return outcome

    async def _index(self, conn: AsyncConnection, exports: list[_Export]) -> StageOutcome:
        """Index exports (in the order given): a row per trace and export holding the spans
        not indexed before; an export that brought no new span is deleted."""
        states = await self._touch(conn, exports)
        known = await self._known(conn, sorted(states))
        rows: list[tuple[str, int, str, bool]] = []
        accepted = duplicates = late = 0
        late_traces: dict[str, str | None] = {}
        for export in exports:
            kept = len(rows)
            for trace, ids in export.spans.items():
                seen = known.setdefault(trace, set())
                new = [i for i in dict.fromkeys(ids) if i not in seen]
                duplicates += len(ids) - len(new)
                if not new:
                    continue
                seen.update(new)
                is_late = states[trace][0] != OPEN
                if is_late:
                    late += len(new)
                    late_traces[trace] = states[trace][1]
                else:
                    accepted += len(new)
                rows.append((trace, export.export_id, "".join(new), is_late))
            if len(rows) == kept:  # nothing new in it: not kept
                await conn.execute(delete(E).where(E.c.export_id == export.export_id))
        if rows:
            await conn.execute(self._insert_spans_sql, _columns(conn, rows))
        rooted = {t for e in exports for t in e.roots}
        return StageOutcome(
            accepted=accepted,
            duplicates=duplicates,
            late=late,
            late_traces=late_traces,
            rooted=tuple(t for t in sorted(rooted) if states[t][0] == OPEN),
        )

    async def _touch(
        self, conn: AsyncConnection, exports: list[_Export]
    ) -> dict[str, tuple[str, str | None]]:
        """Upsert the exports' traces (in one lock order for every writer), seen when their
        last export arrived; trace id → (state, run id)."""
        seen: dict[str, datetime] = {}
        for export in exports:
            for trace in export.spans:
                seen[trace] = max(seen.get(trace, export.received_at), export.received_at)
        traces = sorted(seen)
        rooted = {t for e in exports for t in e.roots}
        roots = [t in rooted for t in traces]
        if conn.dialect.name == "postgresql":
            params = {"traces": traces, "roots": roots, "seen": [seen[t] for t in traces]}
        else:
            stamp = T.c.last_seen.type._cached_bind_processor(conn.dialect)
            assert stamp is not None
            rows = [[t, r, stamp(seen[t])] for t, r in zip(traces, roots, strict=True)]
            params = {"traces": json.dumps(rows)}
        touched = await conn.execute(self._touch_sql, params)
        return {r.trace_id: (r.state, r.run_id) for r in touched}

    async def _known(self, conn: AsyncConnection, traces: list[str]) -> dict[str, set[str]]:
        """The span ids indexed of each trace (late ones too)."""
        known: dict[str, set[str]] = {}
        for row in await conn.execute(self._known_sql, {"traces": _bound(conn, traces)}):
            known.setdefault(row.trace_id, set()).update(_split(row.span_ids, _SPAN_HEX))
        return known

    async def claim(
        self, trace_id: str, ended_by: str, now: datetime, stale_before: datetime
    ) -> str | None:
        async with self._locked(exclusive=True) as conn:
            # what was acknowledged before the claim belongs to the trace: indexed first
            _count(await self._index_pending(conn))
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
            select(S.c.export_id, S.c.span_ids)
            .where(S.c.trace_id == trace_id, S.c.late.is_(False))
            .order_by(S.c.export_id)
        )
        async with self.db.read() as conn:
            ids: dict[int, set[str]] = {}
            for row in await conn.execute(spans):
                ids.setdefault(row.export_id, set()).update(_split(row.span_ids, _SPAN_HEX))
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

"""Reading the ledger: runs, their events with checked payloads, and verification of a run's
chain and evidence. Part of ``stores.sql.ledger.SqlLedger``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from models import ExecutionEvent, ExecutionEventType, RunRecord
from models.chain import ChainRow, ChainVerification, header_genesis, verify_chain
from models.cycle_pause import cycle_collection_paused
from models.digest import verify_content
from models.errors import IntegrityError, NotFoundError, RunNotFoundError, StoreError
from models.verification import chained_events
from runtime.ports import ArtifactStore
from stores.anchors import AnchorLog
from stores.sql import schema
from stores.sql.chain_read import stored_header_genesis, verify_intact_chain
from stores.sql.database import Database, utc
from stores.sql.ledger_payloads import CAS_PREFIX
from stores.sql.run_check import (
    EventsRead,
    RunRows,
    check_headless,
    check_run,
    latest_anchor,
    run_rows,
)

#: rows turned into events between two turns of the event loop (``events_with_payloads``)
YIELD_EVERY_ROWS = 1024


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    graph_id: str
    graph_version: str
    status: str
    created_at: datetime
    event_count: int
    head_hash: str


class LedgerReads:
    """The reads of ``SqlLedger`` (its attributes, set there)."""

    db: Database
    artifacts: ArtifactStore | None
    anchors: AnchorLog | None

    async def get_run(self, run_id: str) -> RunRecord:
        async with self.db.read() as conn:
            row = (
                await conn.execute(
                    select(schema.runs.c.record).where(schema.runs.c.run_id == run_id)
                )
            ).first()
        if row is None:
            raise RunNotFoundError(f"run not found: {run_id!r}")
        return RunRecord.model_validate(row.record)

    async def list_runs(self, *, limit: int = 1000) -> list[RunSummary]:
        r = schema.runs.c
        query = (
            select(
                r.run_id,
                r.graph_id,
                r.graph_version,
                r.status,
                r.created_at,
                r.head_sequence,
                r.head_hash,
            )
            .order_by(r.created_at.desc(), r.run_id)
            .limit(limit)
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [
            RunSummary(
                row.run_id,
                row.graph_id,
                row.graph_version,
                row.status,
                utc(row.created_at),
                row.head_sequence,
                row.head_hash,
            )
            for row in rows
        ]

    async def events(self, run_id: str, *, from_sequence: int = 1) -> list[ExecutionEvent]:
        e = schema.execution_events.c
        query = (
            select(schema.execution_events)
            .where(e.run_id == run_id, e.sequence >= from_sequence)
            .order_by(e.sequence)
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [_event_model(_chain_row(row), row.hash) for row in rows]

    async def events_with_payloads(
        self,
        run_id: str,
        *,
        types: frozenset[ExecutionEventType] | None = None,
        missing_ok: bool = False,
    ) -> list[tuple[ExecutionEvent, bytes | None]]:
        """Events (optionally only some types) with their checked payload bytes, in one query
        for the inline payloads: what replay, completeness and comparison read a run with.
        ``missing_ok``: an unreadable or corrupted payload is ``None`` instead of an error."""
        e = schema.execution_events.c
        query = select(schema.execution_events).where(e.run_id == run_id).order_by(e.sequence)
        if types is not None:
            query = query.where(e.type.in_([str(t) for t in types]))
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        out: list[tuple[ExecutionEvent, bytes | None]] = []
        for index, row in enumerate(rows):
            if index and not index % YIELD_EVERY_ROWS:
                # a long run's rows (100,000 for the comparison of a 50,000-step run) held the
                # loop for seconds: an activity's heartbeats did not get out (issue 35 item 2)
                await asyncio.sleep(0)
            event = _event_model(_chain_row(row), row.hash)
            out.append((event, await self._checked_payload(row, event, missing_ok)))
        return out

    async def events_with_payloads_of(
        self, run_id: str, payload_types: frozenset[ExecutionEventType]
    ) -> list[tuple[ExecutionEvent, bytes | None]]:
        """EVERY event of the run, read in one statement (one snapshot: the last event is the
        head as of the same moment as the others), with the checked payload of the events of
        ``payload_types`` (``None`` for the others). What ingestion rebuilds a run's state
        from, so the state and the head it appends after cannot disagree."""
        e = schema.execution_events.c
        query = select(schema.execution_events).where(e.run_id == run_id).order_by(e.sequence)
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        out: list[tuple[ExecutionEvent, bytes | None]] = []
        for row in rows:
            event = _event_model(_chain_row(row), row.hash)
            wanted = event.type in payload_types
            out.append((event, await self._checked_payload(row, event, False) if wanted else None))
        return out

    async def _checked_payload(
        self, row: Any, event: ExecutionEvent, missing_ok: bool
    ) -> bytes | None:
        try:
            if row.payload is not None:
                what = f"payload of {event.run_id}#{row.sequence}"
                return verify_content(bytes(row.payload), row.payload_hash, what)
            return await self.payload(event)
        except (IntegrityError, NotFoundError, StoreError):
            if not missing_ok:
                raise
            return None

    async def payload(self, event: ExecutionEvent) -> bytes:
        """The payload bytes of ``event``, checked against its ``payload_hash``."""
        if event.payload_ref.startswith(CAS_PREFIX):
            if self.artifacts is None:
                raise StoreError("payload is in the artifact store, which is not configured")
            return await self.artifacts.get(event.payload_ref[len(CAS_PREFIX) :])
        e = schema.execution_events.c
        async with self.db.read() as conn:
            row = (
                await conn.execute(
                    select(e.payload).where(e.run_id == event.run_id, e.sequence == event.sequence)
                )
            ).first()
        if row is None or row.payload is None:
            raise StoreError(f"payload of {event.run_id}#{event.sequence} is missing")
        return verify_content(
            bytes(row.payload), event.payload_hash, f"payload of {event.run_id}#{event.sequence}"
        )

    async def verify(self, run_id: str, *, full: bool = True) -> ChainVerification:
        """Verify the run: its chain from the stored columns and inline payloads and, unless
        ``full`` is False, everything later read as its evidence (``stores.sql.run_check``):
        artifact-stored payloads, referenced artifacts, lookup rows, freeze records, anchor.
        Everything of the database is read in one snapshot (``Database.snapshot``): a run
        being written verifies intact up to the head that snapshot holds."""
        if not full:
            async with self.db.snapshot() as conn:
                return await self._verify(conn, run_id, None)
        # read before the snapshot: an honest anchor then names a head the snapshot holds
        anchor = await latest_anchor(self.anchors, run_id)
        # the full check's rows and parsed payloads hold no cycles: the collector would only
        # walk the heap (``models.cycle_pause``)
        with cycle_collection_paused():
            async with self.db.snapshot() as conn:
                reading = await run_rows(conn, anchor, run_id)
                try:
                    return await self._verify(conn, run_id, reading)
                finally:  # nothing when it is done; else it never outlives the connection
                    reading.cancel()
                    await asyncio.gather(reading, return_exceptions=True)

    async def _verify(
        self, conn: AsyncConnection, run_id: str, rows: asyncio.Future[RunRows] | None
    ) -> ChainVerification:
        """The chain check (and with ``rows``, the full check) on ``conn``'s snapshot."""
        # an intact chain verifies from raw columns (read once, also for the full check: its
        # events handed over chunk by chunk as they verify); a broken one is diagnosed below
        read = EventsRead() if rows is not None else None
        intact = await verify_intact_chain(
            conn, run_id, on_events=None if read is None else read.add
        )
        if intact is not None:
            if read is None or rows is None:
                return intact
            return await check_run(self.artifacts, read.events(), intact, rows, parsed=read.parsed)
        if rows is not None:  # its read ends before the general path's on the connection
            await asyncio.wait([rows])
        r = schema.runs.c
        e = schema.execution_events.c
        head = (
            await conn.execute(
                select(r.head_sequence, r.head_hash, r.record).where(r.run_id == run_id)
            )
        ).first()
        stored = (
            await conn.execute(
                select(schema.execution_events).where(e.run_id == run_id).order_by(e.sequence)
            )
        ).all()
        chain_rows = [_chain_row(row) for row in stored]
        if head is None:
            return await check_headless(self.anchors, run_id, chain_rows)
        chain = verify_chain(
            run_id,
            chain_rows,
            expected_head=(head.head_sequence, head.head_hash),
            genesis=stored_header_genesis(head.record) or header_genesis({"unreadable": True}),
        )
        if rows is None:
            return chain
        return await check_run(self.artifacts, chained_events(chain_rows), chain, rows)


def _chain_row(row: Any) -> ChainRow:
    return ChainRow(
        run_id=row.run_id,
        sequence=row.sequence,
        event_id=row.event_id,
        step_id=row.step_id,
        type=row.type,
        payload_ref=row.payload_ref,
        payload_hash=row.payload_hash,
        previous_hash=row.previous_hash,
        hash=row.hash,
        logical_time=utc(row.logical_time),
        recorded_at=utc(row.recorded_at),
        schema_version=row.schema_version,
        payload=bytes(row.payload) if row.payload is not None else None,
    )


def _event_model(row: ChainRow, link: str) -> ExecutionEvent:
    return ExecutionEvent(
        sequence=row.sequence,
        event_id=row.event_id,
        run_id=row.run_id,
        step_id=row.step_id,
        type=ExecutionEventType(row.type),
        payload_ref=row.payload_ref,
        payload_hash=row.payload_hash,
        previous_hash=row.previous_hash,
        hash=link,
        logical_time=row.logical_time,
        recorded_at=row.recorded_at,
        schema_version=row.schema_version,
    )

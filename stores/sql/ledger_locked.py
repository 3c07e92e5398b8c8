"""THE append path under the run lock, and starting a run (its header and first events in one
transaction, or one batch-writer round trip). Part of ``stores.sql.ledger.SqlLedger``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError as SAIntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from models import ExecutionEvent, RunRecord
from models.canonical import canonicalize
from models.chain import header_genesis
from models.errors import ConflictError, SequenceConflictError, StoreError
from models.privacy import RunSubject
from runtime.ports import NewEvent
from stores.sql import schema
from stores.sql.batch_writer import FastBatch, NeedsGeneralPath, batch_writer
from stores.sql.database import Database
from stores.sql.group_commit import GroupCommitter
from stores.sql.heads import move_heads
from stores.sql.ledger_payloads import PayloadPreparation
from stores.sql.linking import AppendRequest, fast_rows, link_batch, projected
from stores.sql.privacy import insert_missing_raws
from stores.sql.privacy_subjects import add_run_subjects, insert_subjects_if_absent
from stores.sql.projections import write_projections


class LockedAppends(PayloadPreparation):
    """The locked append path and run starts of ``SqlLedger`` (its attributes, set there)."""

    db: Database
    clock: Callable[[], datetime]
    _committer: GroupCommitter[AppendRequest, list[ExecutionEvent]] | None
    _heads: dict[str, tuple[int, str]]

    async def create_run(self, run: RunRecord) -> None:
        """Record a run header; the same header again is accepted, a different one refused."""
        await self.start_run(run, [])

    async def append_locked(
        self,
        conn: AsyncConnection,
        requests: list[AppendRequest],
        recorded_at: datetime,
        *,
        known_heads: dict[str, tuple[int, str]] | None = None,
    ) -> list[list[ExecutionEvent]]:
        """THE append path, inside the caller's transaction: lock each run's head, check the
        expected sequence against it, link and insert the events, move the heads with a
        compare-and-set. Everything a batch writer needs to stay correct is here: the check
        and the insert happen under one lock (PostgreSQL: the run row ``FOR UPDATE``; SQLite:
        the write lock of ``BEGIN IMMEDIATE``), and the ``(run_id, sequence)`` key refuses a
        second event at one sequence even if a caller bypassed the lock.

        ``known_heads``: heads the caller vouches for (a writer's cache); they are neither read
        nor locked, only checked by the compare-and-set, which fails the transaction with a
        ``SequenceConflictError`` when one is stale. The statements are as few as the batch
        allows: one multi-row insert of the events, one of the lookup rows per table, one
        update of every head."""
        run_ids = sorted({r.run_id for r in requests})
        known = known_heads or {}
        unknown = [run_id for run_id in run_ids if run_id not in known]
        heads = {**known, **(await self._locked_heads(conn, unknown) if unknown else {})}
        start = dict(heads)
        batch = link_batch(requests, heads, recorded_at)
        await conn.execute(insert(schema.execution_events), batch.rows)
        if batch.raw_rows:
            await conn.execute(insert(schema.raw_payloads), batch.raw_rows)
        if batch.subjects:
            await insert_subjects_if_absent(conn, batch.subjects, recorded_at)
        if batch.artifact_raws:
            await insert_missing_raws(conn, batch.artifact_raws)
        await move_heads(conn, run_ids, start, heads)
        await write_projections(
            conn,
            [
                projected(event, record, appended)
                for event, record, appended, _ in batch.projections
            ],
            recorded_at,
        )
        return batch.results

    #: ``start_run`` takes ``run_key`` (the run's data key committed with the run)
    starts_with_run_key = True

    async def start_run(
        self,
        run: RunRecord,
        events: Sequence[NewEvent],
        *,
        run_key: bool = False,
        subjects: Sequence[RunSubject] = (),
    ) -> bool:
        """Create a run and append its first events in ONE transaction: both are recorded or
        neither (a refused or failed start leaves no run behind). Every payload is prepared
        (canonicalized, hashed) before anything is written. Returns False when the run exists
        already with this header (nothing written; the caller compares its events); another
        header under the run id is a ``ConflictError``. ``run_key``: the run's raw content
        will be sealed (ingestion with redaction): its data key is made now and committed
        with the run, not by a read and a transaction of its own at the first seal.
        ``subjects``: the run's data subjects, registered in the same transaction (a recorded
        run's start is then one commit, not two)."""
        body = run.model_dump(mode="json")
        prepared = await self._prepare_payloads(run.run_id, events)
        request = AppendRequest(run.run_id, list(events), prepared, 1)
        key = self.vault.new_run_key(run.run_id) if run_key else None
        if self._committer is not None and events and not subjects:
            if await self._start_fast(run, body, request, key):
                return True
        try:
            with _conflicts_named([run.run_id]):
                async with self.db.transaction() as conn:
                    if await _existing_header(conn, run.run_id) is not None:
                        raise _RunExists
                    await conn.execute(insert(schema.runs).values(**_run_row(run, body)))
                    if key is not None:
                        await conn.execute(insert(schema.data_keys).values(**key[0]))
                    if subjects:
                        await add_run_subjects(conn, run.run_id, subjects)
                    head = (0, header_genesis(body))
                    if events:
                        (appended,) = await self.append_locked(conn, [request], self.clock())
                        head = (appended[-1].sequence, appended[-1].hash)
        except (_RunExists, SequenceConflictError):
            # already there (or a concurrent start won the race): the same header is fine
            async with self.db.read() as conn:
                existing = await _existing_header(conn, run.run_id)
            if existing is None:
                raise
            if _header_of(existing) != _header_of(body):
                raise ConflictError(
                    f"run {run.run_id!r} already exists with another header"
                ) from None
            return False
        if key is not None:
            self.vault.adopt_run_key(*key)
        if self._committer is not None:
            # the writer starts from the head it created (checked by the compare-and-set
            # like any cached head): a new run's first append is one round trip too
            self._heads.setdefault(run.run_id, head)
        return True

    async def _start_fast(
        self,
        run: RunRecord,
        body: dict[str, Any],
        request: AppendRequest,
        key: tuple[dict[str, Any], bytes] | None,
    ) -> bool:
        """Start the run through the batch writer: its row (with the head its first events
        make) and those events in one round trip. False when nothing was written (the run
        exists, or a record needs the general path): ``start_run`` then goes the general way,
        which decides what an existing run means."""
        # the first event links to the header (``models.chain.header_genesis``)
        heads = {run.run_id: (0, header_genesis(body))}
        recorded_at = self.clock()
        batch = link_batch([request], heads, recorded_at)
        rows = fast_rows(batch, recorded_at)
        if rows is None:
            return False
        sequence, head_hash = heads[run.run_id]
        row = _run_row(run, body) | {
            "head_sequence": sequence,
            "head_hash": head_hash,
            "record": canonicalize(body).decode(),
        }
        try:
            await batch_writer(self.db).write(
                FastBatch([], rows, new_runs=[row], new_keys=[] if key is None else [key[0]])
            )
        except NeedsGeneralPath:
            return False
        if key is not None:
            self.vault.adopt_run_key(*key)
        self._heads[run.run_id] = (sequence, head_hash)
        return True

    async def _locked_heads(
        self, conn: AsyncConnection, run_ids: list[str]
    ) -> dict[str, tuple[int, str]]:
        """Each run's head (sequence, hash); on PostgreSQL the run rows stay locked until the
        transaction ends."""
        runs = schema.runs
        head_query = select(runs.c.run_id, runs.c.head_sequence, runs.c.head_hash).where(
            runs.c.run_id.in_(run_ids)
        )
        if self.db.is_postgresql:
            # serialises appenders per run: a second writer waits here, then sees
            # the new head (ordered by run id so two batches cannot deadlock)
            head_query = head_query.order_by(runs.c.run_id).with_for_update()
        return {
            row.run_id: (row.head_sequence, row.head_hash)
            for row in (await conn.execute(head_query)).all()
        }


class _RunExists(Exception):
    """Internal: the run row is there already (rolls the start's transaction back)."""


async def _existing_header(conn: AsyncConnection, run_id: str) -> dict[str, Any] | None:
    row = (
        await conn.execute(select(schema.runs.c.record).where(schema.runs.c.run_id == run_id))
    ).first()
    return None if row is None else dict(row.record)


def _header_of(record: dict[str, Any]) -> dict[str, Any]:
    """A run record without what finishing it changes (status, outcome)."""
    return {k: v for k, v in record.items() if k not in ("status", "outcome")}


def _run_row(run: RunRecord, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "graph_id": run.graph_id,
        "graph_version": run.graph_version,
        "status": str(run.status),
        "created_at": run.created_at,
        "head_sequence": 0,
        "head_hash": header_genesis(body),
        "record": body,
    }


@contextlib.contextmanager
def _conflicts_named(run_ids: list[str]) -> Iterator[None]:
    """A unique-key violation of an append is a sequence conflict (a concurrent writer took
    the sequence, the event id or the run id), not a store failure."""
    try:
        yield
    except StoreError as exc:
        if isinstance(exc.__cause__, SAIntegrityError):
            raise SequenceConflictError(
                f"runs {', '.join(run_ids)}: a concurrent append took the sequence or the "
                f"event id is taken: {exc.__cause__.orig!r}"
            ) from exc
        raise
    except SAIntegrityError as exc:
        raise SequenceConflictError(
            f"runs {', '.join(run_ids)}: conflicting append: {exc.orig!r}"
        ) from exc

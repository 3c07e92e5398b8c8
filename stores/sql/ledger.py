"""The event ledger: runs and their hash-chained events in SQL.

Appends are serialised per run: PostgreSQL locks the run row (``FOR UPDATE``), SQLite takes
its write lock at ``BEGIN IMMEDIATE``; the head is then moved with a compare-and-set and the
``(run_id, sequence)`` primary key refuses a second event at one sequence. Two writers can
therefore never fork a chain.

With group commit (the default) the writer keeps the heads of the runs it wrote and neither
reads nor locks them again: the compare-and-set (and the key) check them, and a stale one —
another process appended — sends the batch down the locked path once more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import JsonValue
from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError as SAIntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from models import ExecutionEvent, ExecutionEventType, RunRecord, RunStatus
from models.anchor import Anchor, AnchorEntry
from models.canonical import canonicalize
from models.chain import (
    GENESIS_HASH,
    ChainRow,
    ChainVerification,
    verify_chain,
)
from models.digest import sha256_digest, verify_content
from models.errors import (
    ChainBrokenError,
    ConflictError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    RunNotFoundError,
    SequenceConflictError,
    StoreError,
)
from models.privacy import RunSubject
from runtime.ports import ArtifactStore, NewEvent
from stores.anchors import AnchorLog
from stores.sql import schema
from stores.sql.batch_writer import POSTGRES_LANES, FastBatch, NeedsGeneralPath, batch_writer
from stores.sql.chain_read import read_intact_chain
from stores.sql.cycle_pause import cycle_collection_paused
from stores.sql.database import Database, utc
from stores.sql.group_commit import GroupCommitter
from stores.sql.heads import move_heads
from stores.sql.linking import AppendRequest, fast_rows, link_batch, projected
from stores.sql.privacy import SqlRawVault, insert_missing_raws
from stores.sql.privacy_subjects import insert_subjects_if_absent, learned_subject_rows
from stores.sql.projections import write_projections
from stores.sql.run_check import LookupRows, check_headless, check_run, lookup_read

__all__ = ["CAS_PREFIX", "INLINE_REF", "NewEvent", "RunSummary", "SqlLedger"]

INLINE_PAYLOAD_LIMIT = 64 * 1024
INLINE_REF = "inline"
CAS_PREFIX = "cas:"


#: the raw form of a sanitized artifact: (raw bytes, sanitized hash, policy version, subject)
ArtifactRaw = tuple[bytes, str, str, str | None]

#: what the writer hands back for one append: its events, or why it was not written
Appended = list[ExecutionEvent] | Exception


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    graph_id: str
    graph_version: str
    status: str
    created_at: datetime
    event_count: int
    head_hash: str


def _utcnow() -> datetime:
    return datetime.now(UTC)


class SqlLedger:
    """Runs and events. ``clock`` stamps ``recorded_at`` (the ledger's time, not the agent's)."""

    def __init__(
        self,
        db: Database,
        artifacts: ArtifactStore | None = None,
        *,
        clock: Callable[[], datetime] = _utcnow,
        inline_limit: int = INLINE_PAYLOAD_LIMIT,
        group_commit: bool = True,
        vault: SqlRawVault | None = None,
        anchors: AnchorLog | None = None,
    ) -> None:
        self.db = db
        self.artifacts = artifacts
        #: where raw payloads of sanitized events are sealed; the default loads the KEK from
        #: the environment the first time a raw payload differs from its sanitized view
        self.vault = vault or SqlRawVault(db, artifacts)
        self.clock = clock
        #: where run heads are anchored outside the database (None: not anchored)
        self.anchors = anchors
        self.inline_limit = inline_limit
        self._committer = (
            GroupCommitter(
                self._write_batch,
                lanes=POSTGRES_LANES if db.is_postgresql else 1,  # SQLite has one writer
                key=lambda request: request.run_id,
            )
            if group_commit
            else None
        )
        #: the writer's cached run heads (group commit only: one batch is written at a time, so
        #: the cache moves in commit order). A cached head is not re-selected: the batch's
        #: compare-and-set on the run row checks it, and a head that moved elsewhere (another
        #: process) fails the CAS, drops the entry and the batch is written again from the
        #: locked, freshly read heads.
        self._heads: dict[str, tuple[int, str]] = {}

    # runs -----------------------------------------------------------------------------------

    async def create_run(self, run: RunRecord) -> None:
        """Record a run header; the same header again is accepted, a different one refused."""
        await self.start_run(run, [])

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

    async def finish_run(
        self, run_id: str, status: RunStatus, outcome: JsonValue = None
    ) -> RunRecord:
        # the write-ahead rule: a run's evidence is committed before its header says it ended
        await self.flush()
        run = await self.get_run(run_id)
        finished = run.model_copy(update={"status": status, "outcome": outcome})
        async with self.db.transaction() as conn:
            await conn.execute(
                update(schema.runs)
                .where(schema.runs.c.run_id == run_id)
                .values(status=str(status), record=finished.model_dump(mode="json"))
            )
        # a finished run's head goes outside the database: a later truncation or re-chaining
        # disagrees with it
        # (the chain only: finishing must not read every artifact of the run again)
        await self.anchor(run_id, full=False)
        return finished

    async def anchor(self, run_id: str, *, full: bool = True) -> AnchorEntry | None:
        """Anchor the run's current head in the anchor log (None when there is no log).
        The head is the chain's as verified (``full``: with everything else ``verify``
        checks, including the latest anchor), not the header's: anchoring a run that does not
        verify is refused, so an anchor never vouches for tampered evidence."""
        if self.anchors is None:
            return None
        verification = await self.verify(run_id, full=full)
        if not verification.intact:
            raise ChainBrokenError(
                f"refusing to anchor run {run_id}: {verification.summary()}",
                sequence=verification.broken_at,
            )
        return await self.anchors.append(
            Anchor(
                run_id=run_id,
                sequence=verification.head_sequence,
                head=verification.head_hash,
                at=self.clock(),
            )
        )

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

    # events ---------------------------------------------------------------------------------

    async def append(
        self, run_id: str, event: NewEvent, *, expected_sequence: int | None = None
    ) -> ExecutionEvent:
        """Append one event; ``expected_sequence`` makes the append conditional on the head."""
        (appended,) = await self.append_many(run_id, [event], expected_sequence=expected_sequence)
        return appended

    async def append_many(
        self, run_id: str, events: Sequence[NewEvent], *, expected_sequence: int | None = None
    ) -> list[ExecutionEvent]:
        """Append events atomically, in order. All or none are recorded.

        With group commit, appends that arrive while a transaction is being written are
        written together in the next one (one commit for many appenders); each append still
        succeeds or fails on its own."""
        if not events:
            return []
        prepared = await self._prepare_payloads(run_id, events)
        request = AppendRequest(run_id, list(events), prepared, expected_sequence)
        if self._committer is not None:
            return await self._committer.submit(request)
        return (await self._write_general([run_id], [request]))[0]

    #: ``submit`` takes the raw forms of sanitized artifacts (``artifact_raws``) and the
    #: people a run learned of (``subjects``)
    submits_artifact_raws = True

    async def submit(
        self,
        run_id: str,
        events: Sequence[NewEvent],
        *,
        expected_sequence: int | None = None,
        artifact_raws: Sequence[ArtifactRaw] = (),
        subjects: Sequence[RunSubject] = (),
    ) -> asyncio.Future[list[ExecutionEvent]]:
        """Hand events to the group-commit writer and return at once: the future resolves
        when they are committed (or fails with why they were not). Appends of one run are
        committed in the order they were submitted. Without group commit the events are
        written before this returns (an already resolved future). ``artifact_raws``: raw
        forms of sanitized artifacts (raw bytes, sanitized hash, policy version, subject),
        kept by the vault in the same transaction (unless kept already); ``subjects``: people
        the run learned of (``SubjectKind.PERSON``), its subjects from this transaction on."""
        prepared = await self._prepare_payloads(run_id, events)
        rows = [
            row
            for raw, digest, version, subject in artifact_raws
            for row in await self.vault.artifact_raw_rows(run_id, [(raw, digest)], version, subject)
        ]
        request = AppendRequest(
            run_id,
            list(events),
            prepared,
            expected_sequence,
            rows,
            learned_subject_rows(run_id, subjects),
        )
        if self._committer is not None:
            return self._committer.enqueue(request)
        future: asyncio.Future[list[ExecutionEvent]] = asyncio.get_running_loop().create_future()
        try:
            future.set_result((await self._write_general([run_id], [request]))[0])
        except Exception as exc:  # handed to the submitter through the future
            future.set_exception(exc)
        return future

    async def _write_batch(self, requests: list[AppendRequest]) -> list[Appended]:
        """Write appends of one or more runs in one transaction.

        With group commit the heads of runs this writer wrote before are taken from its cache
        (no head read, no row lock) and a batch of cached runs goes to the database's batch
        writer (one round trip); whatever that cannot write (a head moved elsewhere, a key
        already recorded) is written here, from freshly locked heads."""
        run_ids = sorted({r.run_id for r in requests})
        if self._committer is not None and all(run_id in self._heads for run_id in run_ids):
            written = await self._write_fast(run_ids, requests)
            if written is not None:
                return written
        return list(await self._write_general(run_ids, requests))

    async def _write_general(
        self, run_ids: list[str], requests: list[AppendRequest]
    ) -> list[list[ExecutionEvent]]:
        """The general path: any failure fails every append of the batch (the committer then
        retries them one by one); cached heads are checked by the heads' compare-and-set, and
        on a conflict the batch is written once more from freshly locked heads (the conflict
        was the cache's, or it is real)."""
        cached = (
            {run_id: self._heads[run_id] for run_id in run_ids if run_id in self._heads}
            if self._committer is not None
            else {}
        )
        try:
            results = await self._write_once(run_ids, requests, cached)
        except SequenceConflictError:
            if not cached:
                raise
            self._forget_heads(run_ids)
            results = await self._write_once(run_ids, requests, {})
        except BaseException:
            # the commit may or may not have happened (a dropped connection): read them again
            self._forget_heads(run_ids)
            raise
        if self._committer is not None:
            for request, appended in zip(requests, results, strict=True):
                if appended:
                    self._heads[request.run_id] = (appended[-1].sequence, appended[-1].hash)
        return results

    async def _write_once(
        self,
        run_ids: list[str],
        requests: list[AppendRequest],
        cached: dict[str, tuple[int, str]],
    ) -> list[list[ExecutionEvent]]:
        with _conflicts_named(run_ids):
            async with self.db.transaction() as conn:
                return await self.append_locked(conn, requests, self.clock(), known_heads=cached)

    async def _write_fast(
        self, run_ids: list[str], requests: list[AppendRequest]
    ) -> list[Appended] | None:
        """Write the batch through the batch writer from the cached heads; None when nothing
        was written and the whole batch belongs on the general path. Appends of runs the
        writer could not move (their heads moved elsewhere) are written by the general path
        here, each failing on its own."""
        heads = {run_id: self._heads[run_id] for run_id in run_ids}
        start = dict(heads)
        recorded_at = self.clock()
        try:
            batch = link_batch(requests, heads, recorded_at)
        except SequenceConflictError:
            return None  # an expected sequence the cache disagrees with: read the heads
        rows = fast_rows(batch, recorded_at)
        if rows is None:
            return None
        moves = [(r, start[r][0], heads[r][0], heads[r][1]) for r in run_ids]
        try:
            stale = await batch_writer(self.db).write(FastBatch(moves, rows))
        except NeedsGeneralPath:
            return None
        except BaseException:
            self._forget_heads(run_ids)  # committed or not (a dropped connection): read again
            raise
        self._forget_heads(stale)
        if len(stale) == len(run_ids):
            return None
        written: list[Appended] = []
        rest = [request for request in requests if request.run_id in stale]
        for request, appended in zip(requests, batch.results, strict=True):
            if request.run_id not in stale:
                self._heads[request.run_id] = (appended[-1].sequence, appended[-1].hash)
            written.append(appended)
        if rest:  # appends of runs moved elsewhere: each written (or refused) on its own
            done = iter(await self._write_each(rest))
            written = [
                next(done) if r.run_id in stale else a
                for r, a in zip(requests, written, strict=True)
            ]
        return written

    async def _write_each(self, requests: list[AppendRequest]) -> list[Appended]:
        out: list[Appended] = []
        for request in requests:
            try:
                out.append((await self._write_general([request.run_id], [request]))[0])
            except Exception as exc:  # handed to the appender that made this request
                out.append(exc)
        return out

    def _forget_heads(self, run_ids: Iterable[str]) -> None:
        for run_id in run_ids:
            self._heads.pop(run_id, None)

    async def flush(self) -> None:
        """Wait until every append handed to the writer so far is committed or failed."""
        if self._committer is not None:
            await self._committer.drain()

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
            await insert_subjects_if_absent(conn, batch.subjects)
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

    async def start_run(self, run: RunRecord, events: Sequence[NewEvent]) -> bool:
        """Create a run and append its first events in ONE transaction: both are recorded or
        neither (a refused or failed start leaves no run behind). Every payload is prepared
        (canonicalized, hashed) before anything is written. Returns False when the run exists
        already with this header (nothing written; the caller compares its events); another
        header under the run id is a ``ConflictError``."""
        body = run.model_dump(mode="json")
        prepared = await self._prepare_payloads(run.run_id, events)
        request = AppendRequest(run.run_id, list(events), prepared, 1)
        if self._committer is not None and events and await self._start_fast(run, body, request):
            return True
        try:
            with _conflicts_named([run.run_id]):
                async with self.db.transaction() as conn:
                    if await _existing_header(conn, run.run_id) is not None:
                        raise _RunExists
                    await conn.execute(insert(schema.runs).values(**_run_row(run, body)))
                    head = (0, GENESIS_HASH)
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
        if self._committer is not None:
            # the writer starts from the head it created (checked by the compare-and-set
            # like any cached head): a new run's first append is one round trip too
            self._heads.setdefault(run.run_id, head)
        return True

    async def _start_fast(
        self, run: RunRecord, body: dict[str, Any], request: AppendRequest
    ) -> bool:
        """Start the run through the batch writer: its row (with the head its first events
        make) and those events in one round trip. False when nothing was written (the run
        exists, or a record needs the general path): ``start_run`` then goes the general way,
        which decides what an existing run means."""
        heads = {run.run_id: (0, GENESIS_HASH)}
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
            await batch_writer(self.db).write(FastBatch([], rows, new_runs=[row]))
        except NeedsGeneralPath:
            return False
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

    async def _prepare_payloads(
        self, run_id: str, events: Sequence[NewEvent]
    ) -> list[tuple[str, str, bytes | None, dict[str, Any] | None]]:
        """Each event's payload reference, hash, inline bytes and raw row; the payloads over
        the inline limit are put into the artifact store side by side (their writes overlap)."""
        stored: list[bytes] = []
        prepared = [await self._prepare_payload(run_id, e, stored) for e in events]
        if stored:
            artifacts = self.artifacts
            assert artifacts is not None  # checked by _prepare_payload
            await asyncio.gather(*(artifacts.put(data) for data in stored))
        return prepared

    async def _prepare_payload(
        self, run_id: str, event: NewEvent, stored: list[bytes]
    ) -> tuple[str, str, bytes | None, dict[str, Any] | None]:
        """``stored``: where a payload over the inline limit is added, for the caller to put."""
        data = event.canonical_payload()
        digest = sha256_digest(data)
        raw_columns = await self._prepare_raw(run_id, event, digest)
        if len(data) <= self.inline_limit:
            return INLINE_REF, digest, data, raw_columns
        if self.artifacts is None:
            raise InvalidInputError(
                f"payload of {len(data)} bytes exceeds the inline limit of {self.inline_limit} "
                "and no artifact store is configured"
            )
        stored.append(data)
        return CAS_PREFIX + digest, digest, None, raw_columns

    async def _prepare_raw(
        self, run_id: str, event: NewEvent, sanitized_hash: str
    ) -> dict[str, Any] | None:
        """The ``raw_payloads`` row of a sanitized event: its three hashes/versions always, the
        raw bytes encrypted under the subject's data key when they differ (rule 17). The chain
        covers the sanitized hash only, so destroying the raw content never breaks it."""
        if event.redaction_policy_version is None:
            return None
        raw = event.raw if event.raw is not None else None
        raw_hash = sha256_digest(raw) if raw is not None else sanitized_hash
        columns: dict[str, Any] = {
            "run_id": run_id,
            "sanitized_hash": sanitized_hash,
            "raw_hash": raw_hash,
            "redaction_policy_version": event.redaction_policy_version,
            "subject_id": event.subject_id,
            # every row of a batch has the same columns (one multi-row insert): a row whose
            # raw equals its sanitized view has no ciphertext
            "key_id": None,
            "ciphertext": None,
            "ciphertext_ref": None,
        }
        if raw is not None and raw_hash != sanitized_hash:
            columns |= await self.vault.seal_raw(
                run_id, raw, raw_hash, sanitized_hash, event.subject_id
            )
        return columns

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
        return [
            (event, await self._checked_payload(row, event, missing_ok))
            for row, event in ((row, _event_model(_chain_row(row), row.hash)) for row in rows)
        ]

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
        artifact-stored payloads, referenced artifacts, lookup rows, freeze records, anchor."""
        if not full:
            return await self._verify(run_id, full=False)
        # the full check's rows and parsed payloads hold no cycles: the collector would only
        # walk the heap (``stores.sql.cycle_pause``)
        with cycle_collection_paused():
            # the lookup rows are read on a connection of their own while the chain is read
            async with lookup_read(self.db, run_id) as lookup:
                return await self._verify(run_id, full=True, lookup=lookup)

    async def _verify(
        self, run_id: str, *, full: bool, lookup: asyncio.Future[LookupRows] | None = None
    ) -> ChainVerification:
        # an intact chain verifies from raw columns (read once, also for the full check); a
        # broken one is diagnosed below
        async with self.db.read() as conn:
            intact = await read_intact_chain(conn, run_id, with_events=full)
        if intact is not None:
            chain, stored = intact
            if not full:
                return chain
            return await check_run(
                self.db, self.artifacts, self.anchors, run_id, stored, chain, lookup=lookup
            )
        r = schema.runs.c
        e = schema.execution_events.c
        async with self.db.read() as conn:
            head = (
                await conn.execute(select(r.head_sequence, r.head_hash).where(r.run_id == run_id))
            ).first()
            rows = (
                await conn.execute(
                    select(schema.execution_events).where(e.run_id == run_id).order_by(e.sequence)
                )
            ).all()
        chain_rows = [_chain_row(row) for row in rows]
        if head is None:
            return await check_headless(self.anchors, run_id, chain_rows)
        chain = verify_chain(run_id, chain_rows, expected_head=(head.head_sequence, head.head_hash))
        if not full:
            return chain
        return await check_run(
            self.db, self.artifacts, self.anchors, run_id, chain_rows, chain, lookup=lookup
        )


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
        "head_hash": GENESIS_HASH,
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

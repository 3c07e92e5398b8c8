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
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime

from pydantic import JsonValue
from sqlalchemy import update

from models import ExecutionEvent, RunRecord, RunStatus
from models.anchor import Anchor, AnchorEntry
from models.errors import ChainBrokenError, SequenceConflictError
from models.privacy import RunSubject
from runtime.ports import ArtifactStore, NewEvent
from stores.anchors import AnchorLog
from stores.sql import schema
from stores.sql.batch_writer import POSTGRES_LANES, FastBatch, NeedsGeneralPath, batch_writer
from stores.sql.database import Database
from stores.sql.group_commit import GroupCommitter
from stores.sql.ledger_locked import LockedAppends, _conflicts_named
from stores.sql.ledger_payloads import CAS_PREFIX, INLINE_PAYLOAD_LIMIT, INLINE_REF
from stores.sql.ledger_reads import LedgerReads, RunSummary
from stores.sql.ledger_reads import _chain_row as _chain_row  # bench/bench_verify.py
from stores.sql.linking import AppendRequest, fast_rows, link_batch
from stores.sql.privacy import SqlRawVault
from stores.sql.privacy_subjects import learned_subject_rows

# the ledger's parts live in ``ledger_payloads`` (preparing payloads), ``ledger_locked`` (the
# locked append path, starting a run) and ``ledger_reads`` (runs, events, verification); the
# names callers import from here stay here
__all__ = ["CAS_PREFIX", "INLINE_REF", "NewEvent", "RunSummary", "SqlLedger"]


#: the raw form of a sanitized artifact: (raw bytes, sanitized hash, policy version, subject)
ArtifactRaw = tuple[bytes, str, str, str | None]

#: what the writer hands back for one append: its events, or why it was not written
Appended = list[ExecutionEvent] | Exception


def _utcnow() -> datetime:
    return datetime.now(UTC)


class SqlLedger(LockedAppends, LedgerReads):
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
        """Anchor the run's current head in the anchor log (None when there is no log, or this
        process only checks anchors: ``REPLAYBOOK_ANCHOR_PUBLIC_KEY`` without a signing key).
        The head is the chain's as verified (``full``: with everything else ``verify``
        checks, including the latest anchor), not the header's: anchoring a run that does not
        verify is refused, so an anchor never vouches for tampered evidence."""
        if self.anchors is None or not self.anchors.can_sign:
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
        the run learned of (``SubjectKind.PERSON``), its subjects from this transaction on.
        ``prepare_append`` then ``enqueue_append``."""
        prepared = await self.prepare_append(
            run_id,
            events,
            expected_sequence=expected_sequence,
            artifact_raws=artifact_raws,
            subjects=subjects,
        )
        return await self.enqueue_append(prepared)

    async def prepare_append(
        self,
        run_id: str,
        events: Sequence[NewEvent],
        *,
        expected_sequence: int | None = None,
        artifact_raws: Sequence[ArtifactRaw] = (),
        subjects: Sequence[RunSubject] = (),
    ) -> AppendRequest:
        """``submit``'s first half: each payload's canonical bytes and hash, raw content
        sealed — nothing handed to the writer (a recorder prepares while the evidence writes
        the events wait for are still running)."""
        prepared = await self._prepare_payloads(run_id, events)
        rows = [
            row
            for raw, digest, version, subject in artifact_raws
            for row in await self.vault.artifact_raw_rows(run_id, [(raw, digest)], version, subject)
        ]
        return AppendRequest(
            run_id,
            list(events),
            prepared,
            expected_sequence,
            rows,
            learned_subject_rows(run_id, subjects),
        )

    async def enqueue_append(self, request: AppendRequest) -> asyncio.Future[list[ExecutionEvent]]:
        """``submit``'s second half: hand a prepared append to the writer."""
        if self._committer is not None:
            return self._committer.enqueue(request)
        future: asyncio.Future[list[ExecutionEvent]] = asyncio.get_running_loop().create_future()
        try:
            future.set_result((await self._write_general([request.run_id], [request]))[0])
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
        # the people the runs learned of go to the batch writer apart: it registers the new
        # ones in the governance log in the same transaction (``fast_rows`` alone refuses them)
        subjects, batch.subjects = batch.subjects, []
        rows = fast_rows(batch, recorded_at)
        if rows is None:
            return None
        moves = [(r, start[r][0], heads[r][0], heads[r][1]) for r in run_ids]
        try:
            stale = await batch_writer(self.db).write(
                FastBatch(moves, rows, subjects=subjects, registered_at=recorded_at)
            )
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

"""The recorder's write modes, one small object each behind ``runtime.ports.RecordingWrites``.

- ``DirectWrites``: each event is appended (after the buffered clock reads) before ``record``
  returns; the evidence it references is written first.
- ``DeferredWrites``: every event waits in the recorder's buffer until ``flush`` appends them
  in one atomic append at the expected sequence (a replay step is recorded whole or not at
  all, so a retried step never duplicates events).
- ``WriteBehindWrites`` (the recording path): events are handed to the ledger's group-commit
  writer and ``record`` returns; they are made durable where it matters — before a side
  effect's provider is called (``record(durable=True)``) and before the run reports its end
  (``flush``). Each hand-off names the sequence it must land at, so a head moved by anyone
  else fails it instead of interleaving. Artifacts are put in the background (``HandOff``);
  raw forms of sanitized artifacts and the people the run learns of go with the next append,
  in its transaction.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Sequence
from typing import Any

from models import ExecutionEvent
from models.digest import sha256_digest
from models.privacy import RunSubject
from runtime.concurrent_puts import start_put
from runtime.ports import (
    ArtifactRaw,
    ArtifactStore,
    EventLedger,
    NewEvent,
    RawVault,
    RecordedRun,
    RecordingWrites,
    VaultedLedger,
    WriteBehindLedger,
)
from runtime.unknown_outcomes import count_unknown_recorded
from runtime.write_behind import HandOff


def recording_writes(
    ledger: EventLedger,
    artifacts: ArtifactStore,
    run_id: str,
    *,
    deferred: bool,
    write_behind: bool,
) -> RecordingWrites:
    """The write mode of a recorder: deferred, write-behind (when the ledger has a writer to
    hand appends to; else direct) or direct. Raw content is kept when the ledger has a vault
    (a ledger that keeps no raw content has no vault, nor subjects, to tell)."""
    if write_behind and not deferred and isinstance(ledger, WriteBehindLedger):
        return WriteBehindWrites(ledger, artifacts, run_id)
    vault = ledger.vault if isinstance(ledger, VaultedLedger) else None
    if deferred:
        return DeferredWrites(ledger, artifacts, run_id, vault)
    return DirectWrites(ledger, artifacts, run_id, vault)


async def append_buffered(
    ledger: EventLedger, run_id: str, run: RecordedRun, expected_sequence: int | None
) -> None:
    """Append the run's buffered events in one append (at ``expected_sequence``)."""
    if not run.buffered:
        return
    events = list(run.buffered)
    appended = await ledger.append_many(run_id, events, expected_sequence=expected_sequence)
    run.buffered.clear()
    run.last_sequence = appended[-1].sequence
    count_unknown_recorded(events)


class DirectWrites:
    """Each event written before ``record`` returns, the evidence it references first."""

    def __init__(
        self, ledger: EventLedger, artifacts: ArtifactStore, run_id: str, vault: RawVault | None
    ) -> None:
        self.ledger = ledger
        self.artifacts = artifacts
        self.run_id = run_id
        self.vault = vault

    async def record(
        self, run: RecordedRun, event: NewEvent, *, durable: bool
    ) -> ExecutionEvent | None:
        events = [*run.buffered, event]
        run.buffered.clear()
        appended = await self.ledger.append_many(self.run_id, events)
        run.last_sequence = appended[-1].sequence
        count_unknown_recorded(events)
        return appended[-1]

    async def flush(self, run: RecordedRun, expected_sequence: int | None) -> None:
        await append_buffered(self.ledger, self.run_id, run, expected_sequence)

    async def put_artifact(self, data: bytes) -> str:
        return await self.artifacts.put(data)

    async def add_subjects(self, subjects: Sequence[RunSubject]) -> None:
        if self.vault is not None:
            await self.vault.add_subjects(self.run_id, subjects)

    async def keep_raw_artifact(
        self, raw: bytes, digest: str, policy_version: str, subject_id: str | None
    ) -> None:
        if self.vault is not None:
            await self.vault.record_artifact_raw(
                self.run_id, raw, digest, policy_version, subject_id
            )


class DeferredWrites(DirectWrites):
    """Every event kept in the recorder's buffer until ``flush`` writes them at once."""

    async def record(
        self, run: RecordedRun, event: NewEvent, *, durable: bool
    ) -> ExecutionEvent | None:
        run.buffered.append(event)
        return None


class WriteBehindWrites:
    """Events handed to the ledger's group-commit writer; durable at ``flush`` and at
    ``record(durable=True)``."""

    def __init__(self, ledger: WriteBehindLedger, artifacts: ArtifactStore, run_id: str) -> None:
        self.ledger = ledger
        self.artifacts = artifacts
        self.run_id = run_id
        #: the evidence writes (artifacts) go behind too, and the events after them reach the
        #: ledger once they are durable
        self._behind = HandOff(ledger, run_id)
        #: artifacts put (or being put) by this recorder: the same bytes are not put again
        self._put: set[str] = set()
        #: raw forms of sanitized artifacts, to go with the next append (in its transaction:
        #: the events after the artifacts are those that reference them), each digest once
        self._raws_for_append: list[ArtifactRaw] = []
        self._raw_digests: set[str] = set()
        #: likewise the people the run learns of: with the next append
        self._subjects_for_append: list[RunSubject] = []
        self._subjects_learned: dict[str, RunSubject] = {}
        self._in_flight: deque[asyncio.Future[list[ExecutionEvent]]] = deque()
        #: the sequence of the last handed-off event known committed: after a failed
        #: hand-off the recorder goes on from there (its RUN_FAILED lands after what is real)
        self._committed = 0

    async def record(
        self, run: RecordedRun, event: NewEvent, *, durable: bool
    ) -> ExecutionEvent | None:
        events = [*run.buffered, event]
        run.buffered.clear()
        self._raise_failed(run)
        expected = run.last_sequence + 1
        if not self._in_flight:  # nothing pending: the head before this is what is real
            self._committed = max(self._committed, run.last_sequence)
        future = await self._behind.append(events, expected, **self._with_append())
        future.add_done_callback(functools.partial(self._note_committed, events))
        self._in_flight.append(future)
        run.last_sequence += len(events)
        if durable:
            await self.flush(run, None)
        return None

    async def flush(self, run: RecordedRun, expected_sequence: int | None) -> None:
        await self._behind.wait_writes()
        await self._write_left_over()
        if self._in_flight:
            await asyncio.wait(self._in_flight)
            for future in self._in_flight:
                failure = future.exception()
                if failure is not None:
                    self._give_up_in_flight(run)
                    raise failure
            self._in_flight = deque()
        await append_buffered(self.ledger, self.run_id, run, expected_sequence)

    async def put_artifact(self, data: bytes) -> str:
        digest = sha256_digest(data)
        if digest not in self._put:
            self._put.add(digest)
            await self._behind.write(start_put(self.artifacts, data, digest))
        return digest

    async def add_subjects(self, subjects: Sequence[RunSubject]) -> None:
        # in the transaction of the next append: before the raw content after it
        new = [s for s in subjects if s.subject_id not in self._subjects_learned]
        self._subjects_learned.update((s.subject_id, s) for s in new)
        self._subjects_for_append.extend(new)

    async def keep_raw_artifact(
        self, raw: bytes, digest: str, policy_version: str, subject_id: str | None
    ) -> None:
        if digest not in self._raw_digests:
            self._raw_digests.add(digest)
            self._raws_for_append.append((raw, digest, policy_version, subject_id))

    def _with_append(self) -> dict[str, Any]:
        """What waits for the next append to be written with it (the ledger's ``submit``)."""
        extra: dict[str, Any] = {}
        if self._subjects_for_append:
            extra["subjects"], self._subjects_for_append = self._subjects_for_append, []
        if self._raws_for_append:
            extra["artifact_raws"], self._raws_for_append = self._raws_for_append, []
        return extra

    async def _write_left_over(self) -> None:
        """What was to go with the next append when none came: kept on its own (the
        subjects first: raw content is never durable before them)."""
        extra = self._with_append()
        vault = self.ledger.vault
        if extra.get("subjects"):
            await vault.add_subjects(self.run_id, extra["subjects"])
        raws: list[ArtifactRaw] = extra.get("artifact_raws", [])
        if raws:
            await vault.record_artifact_raws(
                self.run_id, [(raw, digest) for raw, digest, *_ in raws], *raws[0][2:]
            )

    def _note_committed(
        self, events: list[NewEvent], future: asyncio.Future[list[ExecutionEvent]]
    ) -> None:
        if not future.cancelled() and future.exception() is None and future.result():
            self._committed = max(self._committed, future.result()[-1].sequence)
            # an UNKNOWN is counted once it is durable, as on the direct path
            count_unknown_recorded(events)

    def _raise_failed(self, run: RecordedRun) -> None:
        """A handed-off append that failed fails the run at its next event (its successors
        would land at the wrong sequence anyway). Appends are committed in order, so the done
        ones are at the front: checked and dropped there (constant work per event, however
        far behind the writer is; ``flush`` checks them all)."""
        in_flight = self._in_flight
        while in_flight and in_flight[0].done():
            failure = in_flight.popleft().exception()
            if failure is not None:
                self._give_up_in_flight(run)
                raise failure

    def _give_up_in_flight(self, run: RecordedRun) -> None:
        """After a failed hand-off: what is still in flight fails too (it names sequences
        after the failed one), and the recorder continues after the last committed event."""
        for future in self._in_flight:
            if future.done() and not future.cancelled():
                future.exception()  # retrieved: the first failure is the one raised
        self._in_flight = deque()
        self._behind.give_up()
        run.last_sequence = self._committed
        # what went with the failed appends is not known to be there: the people again
        self._subjects_for_append = list(self._subjects_learned.values())

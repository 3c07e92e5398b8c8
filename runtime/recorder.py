"""Writes one run's evidence into the ledger, in order, stamped with logical time.

Synchronous observations (clock reads) are buffered and written just before the next event,
in the same transaction, so the order the agent saw is the order the chain records.

With a ``redaction`` policy (rule 17) every payload is written as its sanitized view, the raw
canonical bytes handed to the ledger to be kept encrypted under the run's ``subject_id``; JSON
put in the artifact store (messages, checkpoint state) is sanitized the same way. Hashes that
key replay lookups (fixture request hash, action hash, policy input hash) are taken over
``hashing_view`` — the sanitized view — so replay, which sees sanitized evidence, matches them.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Coroutine
from datetime import datetime
from typing import Any

import structlog
from pydantic import JsonValue

from models import (
    ExecutionEvent,
    ExecutionEventType,
    HashedRecord,
    ReplayCheckpoint,
    format_instant,
)
from models.canonical import canonicalize
from models.capability import Capability
from models.digest import sha256_digest
from models.errors import InvalidInputError
from models.privacy import RunSubject, people_in, person_subjects
from models.redaction import RedactionPolicy
from runtime.clock import RecordingClock, SystemAgentClock
from runtime.concurrent_puts import start_put
from runtime.ports import ArtifactStore, EventLedger, NewEvent
from runtime.unknown_outcomes import count_unknown_recorded
from runtime.write_behind import HandOff

log = structlog.get_logger(__name__)
E = ExecutionEventType


class RunRecorder:
    def __init__(
        self,
        ledger: EventLedger,
        artifacts: ArtifactStore,
        run_id: str,
        clock: RecordingClock | None = None,
        *,
        deferred: bool = False,
        redaction: RedactionPolicy | None = None,
        subject_id: str | None = None,
        write_behind: bool = False,
    ) -> None:
        self.ledger = ledger
        self.artifacts = artifacts
        self.run_id = run_id
        # agent reads of the clock are buffered here and written before the next event
        self.clock: RecordingClock = clock or SystemAgentClock(on_read=self.buffer_clock_read)
        self.step_id = "run"
        self._pending: list[NewEvent] = []
        self.last_sequence = 0
        #: deferred: keep every event until ``flush`` writes them in one atomic append (a replay
        #: step is recorded whole or not at all, so a retried step never duplicates events)
        self.deferred = deferred
        #: None: payloads are recorded as given, with no raw/sanitized metadata (as before 0003)
        self.redaction = redaction
        self.subject_id = subject_id
        #: write-behind (the recording path): ``record`` hands its events to the ledger's
        #: group-commit writer and returns; they are made durable where it matters — before
        #: a side effect's provider is called (``record(durable=True)``) and before the run
        #: reports its end (``flush``). Each hand-off names the sequence it must land at, so a
        #: head moved by anyone else fails it instead of interleaving.
        submit = getattr(ledger, "submit", None) if write_behind and not deferred else None
        #: the evidence writes (artifacts, sealed raw artifacts, subjects) go behind too, and
        #: the events after them reach the ledger once they are durable: ``HandOff``
        self._behind = HandOff(submit, run_id) if submit is not None else None
        #: artifacts put (or being put) by this recorder: the same bytes are not put again
        self._put: set[str] = set()
        #: write-behind: raw forms of sanitized artifacts waiting for their vault write
        self._raw_artifacts: list[tuple[bytes, str]] = []
        self._raw_artifacts_scheduled = False
        #: write-behind, a ledger that keeps them with an append (``submits_artifact_raws``):
        #: the raw forms go with the next append, in its transaction (the events after the
        #: artifacts: those that reference them), each sanitized digest once
        self._raws_with_appends = self._behind is not None and bool(
            getattr(ledger, "submits_artifact_raws", False)
        )
        self._raws_for_append: list[tuple[bytes, str, str, str | None]] = []
        self._raw_digests: set[str] = set()
        #: likewise the people the run learns of (``learn_people``): with the next append
        self._subjects_for_append: list[RunSubject] = []
        self._subjects_learned: dict[str, RunSubject] = {}
        self._in_flight: deque[asyncio.Future[list[ExecutionEvent]]] = deque()
        #: the sequence of the last handed-off event known committed: after a failed
        #: hand-off the recorder goes on from there (its RUN_FAILED lands after what is real)
        self._committed = 0

    async def learn_people(self, capability: Capability, response: Any) -> None:
        """What a provider's result says about people (``Capability.person_records``): their
        names are redacted from here on (``redact-v2``: this result, the model's reply, an
        e-mail body…) and each becomes a data subject of this run, so deleting any of them
        shreds the run's raw content."""
        if capability.person_records is None:
            return
        people = people_in(capability.person_records, response)
        if not people:
            return
        if self.redaction is not None:
            self.redaction = self.redaction.with_names(n for _, names in people for n in names)
        # a ledger that keeps no raw content has no vault (nor subjects) to tell
        add_subjects = getattr(getattr(self.ledger, "vault", None), "add_subjects", None)
        if add_subjects is not None:
            subjects = person_subjects((s for s, _ in people), capability.capability_id)
            if self._raws_with_appends:
                # in the transaction of the next append: before the raw content after it
                new = [s for s in subjects if s.subject_id not in self._subjects_learned]
                self._subjects_learned.update((s.subject_id, s) for s in new)
                self._subjects_for_append.extend(new)
                return
            # write-behind: the raw content recorded after this waits for it to be durable
            await self._evidence_write(add_subjects(self.run_id, subjects))

    async def _evidence_write(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run an evidence write the events recorded after it depend on: now, or (write-behind)
        in the background, those events handed to the ledger once it is durable."""
        if self._behind is None:
            await work
        else:
            await self._behind.write(work)

    async def put_artifact(self, data: bytes) -> str:
        """Put ``data`` into the artifact store and return its digest (write-behind: in the
        background, the events recorded after it waiting for it; each digest once)."""
        if self._behind is None:
            return await self.artifacts.put(data)
        digest = sha256_digest(data)
        if digest not in self._put:
            self._put.add(digest)
            await self._behind.write(start_put(self.artifacts, data, digest))
        return digest

    def hashing_view(self, value: Any) -> Any:
        """The view lookup hashes are computed over: sanitized, so raw and sanitized inputs
        hash the same (sanitizing is idempotent)."""
        return self.redaction.sanitize(value) if self.redaction is not None else value

    def _event(
        self,
        step_id: str,
        type: ExecutionEventType,
        record: HashedRecord | None,
        payload: JsonValue,
    ) -> NewEvent:
        logical_time = self.logical_time()
        if self.redaction is None:
            return NewEvent(step_id, type, logical_time, record=record, payload=payload)
        raw = record.canonical_payload() if record is not None else payload
        sanitized = self.redaction.sanitize(raw)
        # nothing redacted: the record is what it was, its dump the one just made
        record_json = raw if record is not None and sanitized == raw else None
        if record is not None and record_json is None:
            try:
                record = type_of(record).model_validate(sanitized)
            except ValueError as exc:
                raise InvalidInputError(
                    f"the sanitized view of a {type_of(record).__name__} is not a valid record "
                    f"(redaction policy {self.redaction.version}): {exc}"
                ) from exc
        raw_bytes = canonicalize(raw)
        return NewEvent(
            step_id,
            type,
            logical_time,
            record=record,
            payload=sanitized if record is None else None,
            raw=raw_bytes,
            redaction_policy_version=self.redaction.version,
            subject_id=self.subject_id,
            record_json=record_json,
            # nothing redacted: the payload is the raw value (strings replaced by equal ones),
            # so its canonical bytes are those just made
            payload_bytes=raw_bytes if sanitized == raw else None,
        )

    def logical_time(self) -> datetime:
        return self.clock.logical_time()

    def buffer_clock_read(self, value: datetime) -> None:
        event = NewEvent(
            self.step_id, E.CLOCK_READ, value, payload={"value": format_instant(value)}
        )
        if self.redaction is not None:  # a clock reading holds no personal data
            data = canonicalize(event.payload)
            event = NewEvent(
                event.step_id,
                event.type,
                value,
                payload=event.payload,
                raw=data,
                redaction_policy_version=self.redaction.version,
                subject_id=self.subject_id,
            )
        self._pending.append(event)

    async def record(
        self,
        type: ExecutionEventType,
        *,
        record: HashedRecord | None = None,
        payload: JsonValue = None,
        step_id: str | None = None,
        durable: bool = False,
    ) -> ExecutionEvent | None:
        """Append one event (after any buffered ones) and return it once it is durable; in
        deferred mode only buffer it (and return None). In write-behind mode hand it to the
        writer and return None, unless ``durable``: then wait until it and everything before
        it is committed."""
        event = self._event(step_id or self.step_id, type, record, payload)
        if self.deferred:
            self._pending.append(event)
            return None
        events = [*self._pending, event]
        self._pending.clear()
        if self._behind is not None:
            self._raise_failed()
            expected = self.last_sequence + 1
            if not self._in_flight:  # nothing pending: the head before this is what is real
                self._committed = max(self._committed, self.last_sequence)
            future = await self._behind.append(events, expected, **self._with_append())
            future.add_done_callback(functools.partial(self._note_committed, events))
            self._in_flight.append(future)
            self.last_sequence += len(events)
            if durable:
                await self.flush()
            return None
        appended = await self.ledger.append_many(self.run_id, events)
        self.last_sequence = appended[-1].sequence
        count_unknown_recorded(events)
        return appended[-1]

    def _with_append(self) -> dict[str, Any]:
        """What waits for the next append to be written with it (``submits_artifact_raws``)."""
        extra: dict[str, Any] = {}
        if self._subjects_for_append:
            extra["subjects"], self._subjects_for_append = self._subjects_for_append, []
        if self._raws_for_append:
            extra["artifact_raws"], self._raws_for_append = self._raws_for_append, []
        return extra

    def _note_committed(
        self, events: list[NewEvent], future: asyncio.Future[list[ExecutionEvent]]
    ) -> None:
        if not future.cancelled() and future.exception() is None and future.result():
            self._committed = max(self._committed, future.result()[-1].sequence)
            # an UNKNOWN is counted once it is durable, as on the direct path
            count_unknown_recorded(events)

    def _raise_failed(self) -> None:
        """A handed-off append that failed fails the run at its next event (its successors
        would land at the wrong sequence anyway). Appends are committed in order, so the done
        ones are at the front: checked and dropped there (constant work per event, however
        far behind the writer is; ``flush`` checks them all)."""
        in_flight = self._in_flight
        while in_flight and in_flight[0].done():
            failure = in_flight.popleft().exception()
            if failure is not None:
                self._give_up_in_flight()
                raise failure

    def _give_up_in_flight(self) -> None:
        """After a failed hand-off: what is still in flight fails too (it names sequences
        after the failed one), and the recorder continues after the last committed event."""
        for future in self._in_flight:
            if future.done() and not future.cancelled():
                future.exception()  # retrieved: the first failure is the one raised
        self._in_flight = deque()
        if self._behind is not None:
            self._behind.give_up()
        self.last_sequence = self._committed
        # what went with the failed appends is not known to be there: the people again
        self._subjects_for_append = list(self._subjects_learned.values())

    async def flush(self, *, expected_sequence: int | None = None) -> None:
        """Write the buffered events (deferred mode) and wait until everything handed to the
        writer is committed (and every evidence write started, write-behind); raises what kept
        any of it from being committed."""
        if self._behind is not None:
            await self._behind.wait_writes()
            await self._write_left_over()
        if self._in_flight:
            await asyncio.wait(self._in_flight)
            for future in self._in_flight:
                if future.exception() is not None:
                    failure = future.exception()
                    self._give_up_in_flight()
                    raise failure  # type: ignore[misc]
            self._in_flight = deque()
        if self._pending:
            events = list(self._pending)
            appended = await self.ledger.append_many(
                self.run_id, events, expected_sequence=expected_sequence
            )
            self._pending.clear()
            self.last_sequence = appended[-1].sequence
            count_unknown_recorded(events)

    async def _write_left_over(self) -> None:
        """What was to go with the next append when none came: kept on its own (the
        subjects first: raw content is never durable before them)."""
        extra = self._with_append()
        vault = getattr(self.ledger, "vault", None)
        if extra.get("subjects"):
            await vault.add_subjects(self.run_id, extra["subjects"])  # type: ignore[union-attr]
        raws = extra.get("artifact_raws")
        if raws:
            await vault.record_artifact_raws(  # type: ignore[union-attr]
                self.run_id, [(raw, digest) for raw, digest, *_ in raws], *raws[0][2:]
            )

    async def store_json(self, value: Any) -> str:
        """Put canonical JSON (its sanitized view) into the artifact store; returns its digest."""
        return (await self._store_sanitized(value))[0]

    async def _store_sanitized(self, value: Any) -> tuple[str, bytes]:
        if self.redaction is None:
            data = canonicalize(value)
            return await self.put_artifact(data), data
        raw = canonicalize(value)
        sanitized = self.redaction.sanitize(value)
        # most values hold nothing to redact: the same bytes, not canonicalized twice
        data = raw if sanitized == value else canonicalize(sanitized)
        digest = await self.put_artifact(data)
        vault = getattr(self.ledger, "vault", None)
        if data != raw and vault is not None:
            if self._behind is None:
                await vault.record_artifact_raw(
                    self.run_id, raw, digest, self.redaction.version, self.subject_id
                )
            else:
                await self._raw_artifact_behind(raw, digest)
        return digest, data

    async def _raw_artifact_behind(self, raw: bytes, digest: str) -> None:
        """Write-behind: the raw forms of the artifacts stored until the write starts (those of
        one model call's messages…) are kept in one vault transaction."""
        if self._raws_with_appends:
            assert self.redaction is not None  # only sanitized artifacts have a raw form apart
            if digest not in self._raw_digests:
                self._raw_digests.add(digest)
                self._raws_for_append.append((raw, digest, self.redaction.version, self.subject_id))
            return
        self._raw_artifacts.append((raw, digest))
        if not self._raw_artifacts_scheduled:
            self._raw_artifacts_scheduled = True
            await self._evidence_write(self._write_raw_artifacts())

    async def _write_raw_artifacts(self) -> None:
        assert self.redaction is not None  # only sanitized artifacts have a raw form apart
        artifacts, self._raw_artifacts = self._raw_artifacts, []
        self._raw_artifacts_scheduled = False
        vault = self.ledger.vault  # type: ignore[attr-defined]
        version, subject = self.redaction.version, self.subject_id
        if hasattr(vault, "record_artifact_raws"):
            await vault.record_artifact_raws(self.run_id, artifacts, version, subject)
        else:
            for raw, digest in artifacts:
                await vault.record_artifact_raw(self.run_id, raw, digest, version, subject)

    async def checkpoint(
        self,
        step_id: str,
        state: dict[str, Any],
        schema_version: int,
        context_snapshot_id: str | None,
    ) -> ReplayCheckpoint:
        state_ref, data = await self._store_sanitized(state)
        checkpoint = ReplayCheckpoint(
            run_id=self.run_id,
            step_id=step_id,
            sequence=self.last_sequence + len(self._pending) + 1,
            state_ref=state_ref,
            state_hash=sha256_digest(data),
            context_snapshot_id=context_snapshot_id,
            logical_time=self.logical_time(),
            state_schema_version=schema_version,
        )
        await self.record(E.CHECKPOINT, record=checkpoint, step_id=step_id)
        return checkpoint


def type_of(record: HashedRecord) -> type[HashedRecord]:
    return type(record)

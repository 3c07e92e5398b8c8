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
from models.privacy import people_in, person_subjects
from models.redaction import RedactionPolicy
from runtime.clock import RecordingClock, SystemAgentClock
from runtime.ports import ArtifactStore, EventLedger, NewEvent
from runtime.recording_writes import recording_writes

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
        #: deferred: every event waits for ``flush`` (see ``runtime.recording_writes``)
        self.deferred = deferred
        #: None: payloads are recorded as given, with no raw/sanitized metadata (as before 0003)
        self.redaction = redaction
        self.subject_id = subject_id
        #: how events and the evidence they reference reach the stores
        #: (``runtime.recording_writes``): ``deferred`` keeps every event until ``flush``
        #: writes them in one atomic append; ``write_behind`` hands them to the ledger's
        #: group-commit writer, durable at ``record(durable=True)`` and ``flush``
        self._writes = recording_writes(
            ledger, artifacts, run_id, deferred=deferred, write_behind=write_behind
        )

    @property
    def buffered(self) -> list[NewEvent]:
        """The events waiting for the next write (clock reads; deferred: every event)."""
        return self._pending

    async def learn_people(self, capability: Capability, response: Any) -> None:
        """What a provider's result says about people (``Capability.person_records``): their
        names are redacted from here on (``redact-v2``: this result, the model's reply, an
        e-mail body…) and each becomes a data subject of this run, so deleting any of them
        shreds the run's raw content (write-behind: the raw content recorded after this is
        durable only with or after them)."""
        if capability.person_records is None:
            return
        people = people_in(capability.person_records, response)
        if not people:
            return
        if self.redaction is not None:
            self.redaction = self.redaction.with_names(n for _, names in people for n in names)
        subjects = person_subjects((s for s, _ in people), capability.capability_id)
        await self._writes.add_subjects(subjects)

    async def put_artifact(self, data: bytes) -> str:
        """Put ``data`` into the artifact store and return its digest (write-behind: in the
        background, the events recorded after it waiting for it; each digest once)."""
        return await self._writes.put_artifact(data)

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
            record = sanitized_record(record, sanitized, self.redaction.version)
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
        return await self._writes.record(self, event, durable=durable)

    async def flush(self, *, expected_sequence: int | None = None) -> None:
        """Write the buffered events (deferred mode) and wait until everything handed to the
        writer is committed (and every evidence write started, write-behind); raises what kept
        any of it from being committed."""
        await self._writes.flush(self, expected_sequence)

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
        if data != raw:
            await self._writes.keep_raw_artifact(
                raw, digest, self.redaction.version, self.subject_id
            )
        return digest, data

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


def sanitized_record(record: HashedRecord, sanitized: Any, policy_version: str) -> HashedRecord:
    """``record``'s sanitized view validated as its own type; a view that is not a valid
    record is refused, naming the type and the redaction policy."""
    try:
        return type_of(record).model_validate(sanitized)
    except ValueError as exc:
        raise InvalidInputError(
            f"the sanitized view of a {type_of(record).__name__} is not a valid record "
            f"(redaction policy {policy_version}): {exc}"
        ) from exc

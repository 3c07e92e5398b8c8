"""A run recorder for ingestion: it buffers the ledger events one call produces and names each
after the client event it came from, so a re-sent event is recognised by its ledger events.

Event id: ``<run_id>:<client sequence>:<n>:<content digest>`` (client sequence 0 is the run
header). The chain covers the event id, so these markers are as tamper-evident as the rest.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast
from weakref import WeakKeyDictionary

from pydantic import JsonValue

from models import ExecutionEvent, ExecutionEventType, HashedRecord
from models.canonical import canonical_hash, canonicalize
from models.digest import digest_hex
from models.privacy import RunSubject, SubjectKind
from models.redaction import RedactionPolicy, pseudonym_subjects
from runtime.ports import ArtifactStore, EventLedger, NewEvent, WriteBehindLedger, subject_vault
from runtime.recorder import RunRecorder, sanitized_record
from runtime.unknown_outcomes import count_unknown_recorded

#: where a subject found by redaction is said to come from
SUBJECT_SOURCE = "redaction:ingest"

#: hex digits of the content digest kept in an event id
DIGEST_CHARS = 16


class IngestClock:
    """The agent's time as the client reported it; ingestion never reads the system clock."""

    def __init__(self, start: datetime) -> None:
        self.current = start

    def now(self) -> datetime:
        return self.current

    def logical_time(self) -> datetime:
        return self.current


def content_digest(value: JsonValue) -> str:
    return digest_hex(canonical_hash(value))[:DIGEST_CHARS]


@dataclass(frozen=True)
class Marker:
    """Which client event a ledger event was recorded for."""

    sequence: int
    digest: str


def marker_of(run_id: str, event: ExecutionEvent) -> Marker | None:
    return marker_of_id(run_id, event.event_id)


def marker_of_id(run_id: str, event_id: str) -> Marker | None:
    prefix, _, rest = event_id.rpartition(":")
    head, _, _n = prefix.rpartition(":")
    owner, _, sequence = head.rpartition(":")
    if owner != run_id or not sequence.isdigit():
        return None  # not recorded by ingestion (e.g. a run recorded by our runtime)
    return Marker(int(sequence), rest)


#: whether each ledger object has a group-commit writer (``WriteBehindLedger``): a runtime
#: protocol check walks the protocol's members on every call (tens of µs); a ledger object's
#: methods do not change while it lives
_WRITERS: WeakKeyDictionary[object, bool] = WeakKeyDictionary()


def _has_writer(ledger: EventLedger) -> bool:
    known = _WRITERS.get(ledger)
    if known is None:
        known = _WRITERS[ledger] = isinstance(ledger, WriteBehindLedger)
    return known


class IngestRecorder(RunRecorder):
    def __init__(
        self, ledger: EventLedger, artifacts: ArtifactStore, run_id: str, start: datetime, head: int
    ) -> None:
        self.ingest_clock = IngestClock(start)
        super().__init__(ledger, artifacts, run_id, self.ingest_clock, deferred=True)
        self.last_sequence = head
        self._marker = Marker(0, "")
        self._count = 0
        #: canonical message bytes -> artifact digest, so each message is stored once (per
        #: run while this process keeps the run's state, ``IngestState.stored_messages``)
        self.stored_messages: dict[bytes, str] = {}
        #: the data subjects the sanitized payloads name (``models.redaction.pseudonym_subjects``)
        self.subjects: set[str] = set()

    def begin(self, sequence: int, digest: str, at: datetime | None) -> None:
        """Start recording the ledger events of client event ``sequence``."""
        self._marker = Marker(sequence, digest)
        self._count = 0
        if at is not None:
            self.ingest_clock.current = at

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def append(self, expected_sequence: int, subjects: Iterable[str]) -> None:
        """Append the buffered events at ``expected_sequence`` (``SequenceConflictError`` when
        the run's head is elsewhere), with ``subjects`` (pseudonyms of people they name) made
        the run's data subjects in the same transaction when the ledger has a group-commit
        writer (``WriteBehindLedger.submit``, as the recorder runtime's write-behind path):
        raw content is never durable before its subjects, in one transaction, not two."""
        people = [
            RunSubject(subject_id=s, kind=SubjectKind.PERSON, source=SUBJECT_SOURCE)
            for s in sorted(set(subjects))
        ]
        ledger = self.ledger
        if not _has_writer(ledger):
            vault = subject_vault(ledger)
            if people and vault is not None:  # subjects first, then the events
                await vault.add_subjects(self.run_id, people)
            await self.flush(expected_sequence=expected_sequence)
            return
        events = list(self._pending)
        committed = await cast(WriteBehindLedger, ledger).submit(
            self.run_id, events, expected_sequence=expected_sequence, subjects=people
        )
        appended = await committed
        self._pending.clear()
        self.last_sequence = appended[-1].sequence
        count_unknown_recorded(events)

    def take_pending(self) -> list[NewEvent]:
        """The buffered events, handed to a caller that writes them itself (the run's start)."""
        events, self._pending = list(self._pending), []
        self.last_sequence += len(events)
        return events

    async def record(
        self,
        type: ExecutionEventType,
        *,
        record: HashedRecord | None = None,
        payload: JsonValue = None,
        step_id: str | None = None,
        durable: bool = False,  # every event of a call is written at its end, in one append
    ) -> ExecutionEvent | None:
        self._count += 1
        event_id = f"{self.run_id}:{self._marker.sequence}:{self._count}:{self._marker.digest}"
        step = step_id or self.step_id
        if self.redaction is None:
            event = NewEvent(
                step, type, self.logical_time(), record=record, payload=payload, event_id=event_id
            )
        else:
            # the sanitized view is recorded, the raw bytes sealed beside it (rule 17); each
            # person it names by pseudonym becomes a subject of the run
            event = self._sanitized_event(step, type, record, payload, event_id, self.redaction)
            self.subjects |= pseudonym_subjects(event.canonical_payload())
        self._pending.append(event)
        return None

    def _sanitized_event(
        self,
        step_id: str,
        type: ExecutionEventType,
        record: HashedRecord | None,
        payload: JsonValue,
        event_id: str,
        policy: RedactionPolicy,
    ) -> NewEvent:
        """``RunRecorder._event`` made under its ingestion id at once (that one draws a
        uuid4 for an id that was then replaced, through ``dataclasses.replace``: 17 times a
        run) and with the canonical bytes of the sanitized view when it differs from the raw
        value: they were made twice more (the subjects above, then the ledger's payload)."""
        raw = record.canonical_payload() if record is not None else payload
        sanitized = policy.sanitize(raw)
        raw_bytes = canonicalize(raw)
        record_json: Any = None
        if sanitized == raw:
            # nothing redacted: the record is what it was, its dump the one just made, and
            # the payload's canonical bytes the raw ones (strings replaced by equal ones)
            record_json = raw if record is not None else None
            payload_bytes = raw_bytes
        else:
            if record is not None:
                record = sanitized_record(record, sanitized, policy.version)
                record_json = record.canonical_payload()  # what the ledger records and hashes
            payload_bytes = canonicalize(sanitized if record_json is None else record_json)
        return NewEvent(
            step_id,
            type,
            self.logical_time(),
            record=record,
            payload=sanitized if record is None else None,
            event_id=event_id,
            raw=raw_bytes,
            redaction_policy_version=policy.version,
            subject_id=self.subject_id,
            record_json=record_json,
            payload_bytes=payload_bytes,
        )

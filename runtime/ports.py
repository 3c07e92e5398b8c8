"""The storage protocols the runtime needs; ``stores/`` implements them.

Declared here so the runtime depends on behaviour, not on SQLAlchemy or boto3.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from pydantic import JsonValue

from models import ExecutionEvent, ExecutionEventType, HashedRecord, RunRecord, RunStatus
from models.canonical import canonicalize
from models.chain import ChainVerification
from models.model_call import ModelRequest, ModelResponse
from models.privacy import RunSubject
from runtime.ids import new_uuid


@runtime_checkable
class ArtifactStore(Protocol):
    """A content-addressed blob store keyed by ``sha256:<hex>`` digests.

    Every read re-hashes the bytes: a corrupted object raises ``ArtifactIntegrityError`` and
    never returns bad bytes. ``put`` is idempotent (same bytes, same key, one object).
    """

    #: A short description for logs and ``status`` output, e.g. ``file:///…`` or ``s3://b/p``.
    location: str

    async def put(self, data: bytes) -> str:
        """Store ``data`` and return its digest."""
        ...

    async def get(self, digest: str) -> bytes:
        """Return the bytes stored under ``digest`` after checking they hash to it."""
        ...

    async def exists(self, digest: str) -> bool: ...

    async def delete(self, digest: str) -> None:
        """Delete an object; refused with ``EvidenceLockedError`` under legal hold or retention."""
        ...

    async def set_legal_hold(self, digest: str, on: bool) -> None: ...

    async def legal_hold(self, digest: str) -> bool: ...

    async def set_retention(self, digest: str, until: datetime) -> None:
        """Keep the object at least until ``until`` (UTC); retention is only ever extended."""
        ...

    async def retention(self, digest: str) -> datetime | None: ...

    def enforced_by_backend(self) -> bool:
        """True when holds and retention are enforced by the storage itself (S3 Object Lock),
        not only by Replaybook's own code."""
        ...


@runtime_checkable
class ModelProvider(Protocol):
    """Something that answers chat completions: an OpenAI-compatible endpoint, a scripted model.

    Implementations never retry on their own (the caller, ultimately Temporal, owns retries)
    and raise ``ModelProviderError`` with the provider's reason on failure.
    """

    #: e.g. ``openai-compatible:gpt-4o-mini@https://api.openai.com/v1`` or ``scripted:support-desk@1``
    profile: str

    async def complete(self, request: ModelRequest) -> ModelResponse: ...


@runtime_checkable
class AttributedToolProvider(Protocol):
    """A READ tool's provider that names what answers it (a team's tools module,
    ``runtime.team_tools``), recorded with a fixture miss it answers as ``answered_by``."""

    @property
    def answered_by(self) -> str: ...


@dataclass(frozen=True)
class NewEvent:
    """An event to append: a hashed record (also written to its lookup table) or plain JSON."""

    step_id: str
    type: ExecutionEventType
    logical_time: datetime
    record: HashedRecord | None = None
    payload: JsonValue = None
    event_id: str = field(default_factory=new_uuid)
    #: set when the payload above is a sanitized view (rule 17): the canonical raw bytes it
    #: was made from (kept encrypted beside it), the policy version and the data subject
    raw: bytes | None = None
    redaction_policy_version: str | None = None
    subject_id: str | None = None
    #: ``record.canonical_payload()`` when the maker has it already (not dumped again)
    record_json: Any = field(default=None, repr=False, compare=False)
    #: ``canonicalize(payload_json())`` when the maker has those bytes already (not made again)
    payload_bytes: bytes | None = field(default=None, repr=False, compare=False)

    def canonical_payload(self) -> bytes:
        """The canonical bytes of ``payload_json()`` (those the maker gave, if any)."""
        if self.payload_bytes is not None:
            return self.payload_bytes
        return canonicalize(self.payload_json())

    def payload_json(self) -> Any:
        if self.record is None:
            return self.payload
        if self.record_json is not None:
            return self.record_json
        return self.record.canonical_payload()


@runtime_checkable
class EventLedger(Protocol):
    """The hash-chained event ledger (``stores.sql.ledger.SqlLedger``)."""

    async def create_run(self, run: RunRecord) -> None: ...

    async def get_run(self, run_id: str) -> RunRecord: ...

    async def finish_run(
        self, run_id: str, status: RunStatus, outcome: JsonValue = None
    ) -> RunRecord: ...

    async def append(
        self, run_id: str, event: NewEvent, *, expected_sequence: int | None = None
    ) -> ExecutionEvent: ...

    async def append_many(
        self, run_id: str, events: Sequence[NewEvent], *, expected_sequence: int | None = None
    ) -> list[ExecutionEvent]: ...

    async def events(self, run_id: str, *, from_sequence: int = 1) -> list[ExecutionEvent]: ...

    async def payload(self, event: ExecutionEvent) -> bytes: ...

    async def events_with_payloads(
        self,
        run_id: str,
        *,
        types: frozenset[ExecutionEventType] | None = None,
        missing_ok: bool = False,
    ) -> list[tuple[ExecutionEvent, bytes | None]]: ...

    async def verify(self, run_id: str, *, full: bool = True) -> ChainVerification:
        """The run's chain and, when ``full``, everything read later as its evidence."""
        ...


class RawVault(Protocol):
    """Where a ledger keeps the raw form of sanitized content sealed (rule 17), and which
    people are a run's data subjects (a deletion request of any of them shreds it)."""

    async def add_subjects(self, run_id: str, subjects: Sequence[RunSubject]) -> None: ...

    async def record_artifact_raw(
        self,
        run_id: str,
        raw: bytes,
        sanitized_hash: str,
        policy_version: str,
        subject_id: str | None,
    ) -> None:
        """Keep the raw form of a sanitized artifact (messages, checkpoint state)."""
        ...


class BatchRawVault(RawVault, Protocol):
    async def record_artifact_raws(
        self,
        run_id: str,
        artifacts: Sequence[tuple[bytes, str]],
        policy_version: str,
        subject_id: str | None,
    ) -> None:
        """``record_artifact_raw`` of several (raw bytes, sanitized hash) pairs at once."""
        ...


#: the raw form of a sanitized artifact kept with an append: (raw bytes, sanitized hash,
#: redaction policy version, data subject)
ArtifactRaw = tuple[bytes, str, str, str | None]


@runtime_checkable
class VaultedLedger(Protocol):
    """A ledger that keeps raw content (a sandboxed step's ledger, the SQL ledger)."""

    @property
    def vault(self) -> RawVault: ...


@runtime_checkable
class StoringLedger(Protocol):
    """A ledger that names the artifact store its evidence's artifacts are in (the SQL
    ledger)."""

    @property
    def artifacts(self) -> ArtifactStore | None: ...


@runtime_checkable
class SubjectVault(Protocol):
    """What a vault tells of a run's people and of its destroyed raw content
    (``stores.sql.privacy.SqlRawVault``): a new run takes on its data subjects (a replay, its
    source's), and a replay says when a deletion request left it only the sanitized view."""

    async def add_subjects(self, run_id: str, subjects: Sequence[RunSubject]) -> None: ...

    async def run_subjects(self, run_id: str) -> list[RunSubject]: ...

    async def destroyed_summary(self, run_id: str) -> tuple[int, str | None, datetime | None]:
        """(raw payloads of the run a deletion request destroyed, one request id, its time)."""
        ...


def raw_vault(ledger: object) -> RawVault | None:
    """The ledger's vault when it keeps raw content; None for a ledger that keeps none."""
    return ledger.vault if isinstance(ledger, VaultedLedger) else None


def subject_vault(ledger: object) -> SubjectVault | None:
    """The ledger's vault when it keeps data subjects (the SQL ledger's); None for a ledger
    that keeps no raw content (a test's) or only seals it (a sandboxed step's)."""
    vault = raw_vault(ledger)
    return vault if isinstance(vault, SubjectVault) else None


@runtime_checkable
class WriteBehindLedger(EventLedger, Protocol):
    """A ledger with a group-commit writer (``stores.sql.ledger.SqlLedger``): appends are
    handed to it and committed in the background, in order, with what goes with them."""

    @property
    def vault(self) -> BatchRawVault: ...

    async def submit(
        self,
        run_id: str,
        events: Sequence[NewEvent],
        *,
        expected_sequence: int | None = None,
        artifact_raws: Sequence[ArtifactRaw] = (),
        subjects: Sequence[RunSubject] = (),
    ) -> asyncio.Future[list[ExecutionEvent]]:
        """Hand events to the writer; the future resolves once they are committed, with the
        raw forms of sanitized artifacts and the people the run learned of in the same
        transaction."""
        ...

    async def prepare_append(
        self,
        run_id: str,
        events: Sequence[NewEvent],
        *,
        expected_sequence: int | None = None,
        artifact_raws: Sequence[ArtifactRaw] = (),
        subjects: Sequence[RunSubject] = (),
    ) -> Any:
        """``submit``'s first half: the append prepared (payload hashes, raw content sealed),
        nothing handed to the writer yet."""
        ...

    async def enqueue_append(self, prepared: Any) -> asyncio.Future[list[ExecutionEvent]]:
        """``submit``'s second half: hand what ``prepare_append`` returned to the writer."""
        ...


class RecordedRun(Protocol):
    """A run as its recorder holds it: the sequence of its last event handed to the ledger,
    and the events buffered to be written before the next one (clock reads; a deferred
    recorder's every event)."""

    last_sequence: int

    @property
    def buffered(self) -> list[NewEvent]: ...


class RecordingWrites(Protocol):
    """How a run recorder's events, and the evidence writes they depend on, reach the ledger
    and the artifact store: one small object per write mode (``runtime.recording_writes``:
    direct, deferred, write-behind), chosen when the recorder is made."""

    async def record(
        self, run: RecordedRun, event: NewEvent, *, durable: bool
    ) -> ExecutionEvent | None:
        """Write ``event`` after the run's buffered events (or buffer it, or hand it off);
        the appended event when it is written before this returns."""
        ...

    async def flush(self, run: RecordedRun, expected_sequence: int | None) -> None:
        """Write what is buffered and wait until everything handed off is committed; raises
        what kept any of it from being committed."""
        ...

    async def put_artifact(self, data: bytes) -> str:
        """Store ``data`` (or start storing it) and return its digest."""
        ...

    async def add_subjects(self, subjects: Sequence[RunSubject]) -> None:
        """People the run learned of become its data subjects (no vault: nothing to do)."""
        ...

    async def keep_raw_artifact(
        self, raw: bytes, digest: str, policy_version: str, subject_id: str | None
    ) -> None:
        """Keep the raw form of the sanitized artifact ``digest`` (no vault: nothing kept)."""
        ...


class IngestLedger(EventLedger, Protocol):
    """What ingestion needs beyond the ledger: an atomic start and a one-snapshot read."""

    async def start_run(self, run: RunRecord, events: Sequence[NewEvent]) -> bool:
        """Create the run and append its first events in one transaction (False: the run
        exists with this header, nothing written)."""
        ...

    async def events_with_payloads_of(
        self, run_id: str, payload_types: frozenset[ExecutionEventType]
    ) -> list[tuple[ExecutionEvent, bytes | None]]:
        """Every event of the run in one snapshot, payloads of ``payload_types`` only."""
        ...


@runtime_checkable
class EvidenceReader(Protocol):
    """Lookups of recorded evidence (``stores.sql.evidence.SqlEvidenceReader``)."""

    async def records(self, record_type: type[HashedRecord], run_id: str) -> list[Any]:
        """Every record of ``record_type`` of a run, in recording order."""
        ...

    async def record(self, record_type: type[HashedRecord], key: str) -> Any:
        """One record by its key; ``NotFoundError`` naming it when absent."""
        ...


@dataclass(frozen=True)
class StagedExport:
    """One OTLP export as the receiver stores it before answering: the export's protobuf
    body once (a row per export, not per span or trace) and the ids of its spans, checked,
    for deduplication (a span is indexed once by trace and span id)."""

    #: an ``ExportTraceServiceRequest`` in protobuf (as received; a JSON export re-encoded)
    body: bytes
    #: trace id (lower-case hex, 32 digits) → the ids of its spans in the export (16 digits)
    spans: dict[str, list[str]]
    #: the traces whose root span (no parent) is in the export
    rooted: frozenset[str]


@dataclass(frozen=True)
class StoredExport:
    """A stored export holding spans of one trace: its body and which of its spans are the
    trace's (the ones first received in it, not late)."""

    body: bytes
    span_ids: frozenset[str]


@dataclass(frozen=True)
class StageOutcome:
    """What storing one export did."""

    #: new spans indexed (into open traces)
    accepted: int = 0
    #: spans stored already (an export stored already counts all its spans)
    duplicates: int = 0
    #: new spans of traces already claimed for assembly: kept, but not part of the run
    late: int = 0
    #: trace id → the run of a trace that refused late spans (None while still assembling)
    late_traces: dict[str, str | None] = field(default_factory=dict)
    #: open traces whose root span has arrived (candidates for assembly now)
    rooted: tuple[str, ...] = ()
    #: spans stored, to be indexed after the answer (counted as accepted or duplicate then)
    pending: int = 0


@runtime_checkable
class OtlpSpanStore(Protocol):
    """The OTLP receiver's staging tables (``stores.sql.otlp_spans.SqlOtlpSpans``)."""

    async def stage(self, export: StagedExport, now: datetime) -> StageOutcome:
        """Store the export in one transaction, durably: indexed later (``index``; ``pending``
        counts its spans) when its traces are open, at once when one of them is claimed (the
        late spans counted); an export stored already is not stored again."""
        ...

    async def index(self) -> StageOutcome:
        """Index the exports stored and not indexed yet (their spans by trace and span id, each
        once; their traces' states); what it did."""
        ...

    async def claim(
        self, trace_id: str, ended_by: str, now: datetime, stale_before: datetime
    ) -> str | None:
        """Index what is pending, then claim an open trace (or one claimed before ``stale_before`` by an assembler that
        died) for assembly; its span set is frozen from then on. Returns how the trace ended
        (the first claim's ``ended_by``), None when not claimed."""
        ...

    async def exports(self, trace_id: str) -> list[StoredExport]:
        """The exports holding the trace's spans that are not late, in the order they arrived
        (each span in the export it first arrived in)."""
        ...

    async def finish(
        self, trace_id: str, state: str, run_id: str | None, error: str | None = None
    ) -> None: ...

    async def due(
        self, idle_before: datetime, stale_before: datetime, limit: int = 100
    ) -> list[tuple[str, str]]:
        """Traces to assemble, as (trace id, reason): ``rooted`` (open, its root arrived),
        ``idle`` (open, no span since ``idle_before``) or ``stale`` (claimed before
        ``stale_before`` and never finished)."""
        ...

    async def state(self, trace_id: str) -> dict[str, Any] | None:
        """The trace's row (state, run_id, ended_by, error …), None when unknown."""
        ...


class BenchmarkVerdict(Protocol):
    """A benchmark's own verdict on a replayed conversation (tau-bench's reward, say)."""

    @property
    def counterfactual_reward(self) -> int | None: ...

    @property
    def reason(self) -> str: ...


class CounterfactualEvaluator(Protocol):
    """Would the replay's conversation have passed the source run's task? None when the
    source is not a run this evaluator knows (the worker injects one per benchmark)."""

    async def __call__(self, replay_id: str, source_run_id: str) -> BenchmarkVerdict | None: ...

"""Freezing a run's evidence for an incident (through the storage ports only).

``referenced_artifacts`` finds every artifact the run's evidence points to; ``freeze_evidence``
verifies the run's chain, then puts each of those artifacts on legal hold with retention until
the request's ``retention_until``, and returns the ``FreezeRecord`` naming the chain head it
verified. Persisting the record (``SqlIncidentStore.record_freeze``) is the caller's step.

What is referenced is read from the chain-covered event payloads (so a row edited in a lookup
table cannot hide an artifact) and from the lookup records as well; the union is frozen. Every
artifact is frozen whatever the request's ``types``: evidence of one type points to artifacts
of another (a context snapshot to messages, an event to its payload in the store), and
freezing less than was asked must never happen. ``types`` is recorded with the freeze.

Freezing is idempotent: a hold that is on stays on, retention is only ever extended, and the
same request with the same ``freeze_id`` and ``now`` yields the same record.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from models import (
    ContextSnapshot,
    EvidenceFreezeRequest,
    ExecutionEventType,
    PromptArtifact,
    ReplayCheckpoint,
    RetrievalFixture,
)
from models.digest import is_digest
from models.errors import ChainBrokenError, InvalidInputError
from models.freeze import FreezeRecord
from runtime.ports import ArtifactStore, EventLedger, EvidenceReader

__all__ = ["collect_references", "freeze_evidence", "referenced_artifacts"]

E = ExecutionEventType
CAS_PREFIX = "cas:"
_DIGEST_LENGTH = len("sha256:") + 64
#: concurrent store requests (S3: one HEAD / PUT per request)
_CONCURRENCY = 16

#: events whose payloads point to artifacts
_REFERENCING = frozenset(
    {
        E.PROMPT_COMPILED,
        E.CONTEXT_SNAPSHOT,
        E.RETRIEVAL,
        E.CHECKPOINT,
        E.STEP_COMPLETED,
        E.STATE_MIGRATION,
        E.ARTIFACT,
    }
)


def _refs_in(event_type: ExecutionEventType, payload: Any) -> Iterator[Any]:
    """Values of the top-level ``*_ref`` / ``*_refs`` keys of a payload (prompt ``content_ref``,
    snapshot ``message_refs``/``evidence_refs``/``memory_refs``, checkpoint ``state_ref``, step
    ``random_state_ref``/``state_ref``, migration ``raw_state_ref``/``migrated_state_ref``), the
    chunk hashes of a retrieval and the ``content_hash`` of an artifact. Other hashes (a
    snapshot's ``content_hash`` is its request's hash) name no stored object."""
    if not isinstance(payload, dict):
        return
    for key, value in payload.items():
        if key.endswith("_ref"):
            yield value
        elif key.endswith("_refs") and isinstance(value, list):
            yield from value
    if event_type is E.ARTIFACT:
        yield payload.get("content_hash")
    elif event_type is E.RETRIEVAL and isinstance(payload.get("evidence"), list):
        for item in payload["evidence"]:
            if isinstance(item, dict):
                yield item.get("chunk_hash")


async def collect_references(
    ledger: EventLedger, evidence: EvidenceReader, run_id: str
) -> set[str]:
    """Every ``sha256:`` digest the run's evidence points to, whether or not it is stored."""
    found: list[Any] = []
    for event in await ledger.events(run_id):
        if event.payload_ref.startswith(CAS_PREFIX):
            found.append(event.payload_ref[len(CAS_PREFIX) :])
    # an unreadable payload is skipped here: the chain check of the freeze covers inline
    # payloads, and a damaged payload in the store is itself frozen by its CAS reference
    for event, data in await ledger.events_with_payloads(
        run_id, types=_REFERENCING, missing_ok=True
    ):
        if data is not None:
            try:
                found.extend(_refs_in(event.type, json.loads(data)))
            except ValueError:
                continue
    for prompt in await evidence.records(PromptArtifact, run_id):
        found.append(prompt.content_ref)
    for snapshot in await evidence.records(ContextSnapshot, run_id):
        found.extend((*snapshot.message_refs, *snapshot.evidence_refs, *snapshot.memory_refs))
    for retrieval in await evidence.records(RetrievalFixture, run_id):
        found.extend(item.chunk_hash for item in retrieval.evidence)
    for checkpoint in await evidence.records(ReplayCheckpoint, run_id):
        found.append(checkpoint.state_ref)
    return {value for value in found if is_digest(value) and len(value) == _DIGEST_LENGTH}


async def _gather_limited(calls: Iterable[Any]) -> list[Any]:
    semaphore = asyncio.Semaphore(_CONCURRENCY)

    async def limited(call: Any) -> Any:
        async with semaphore:
            return await call

    return await asyncio.gather(*(limited(c) for c in calls))


async def _split_existing(artifacts: ArtifactStore, digests: set[str]) -> tuple[set[str], set[str]]:
    ordered = sorted(digests)
    present = await _gather_limited(artifacts.exists(d) for d in ordered)
    existing = {d for d, here in zip(ordered, present, strict=True) if here}
    return existing, digests - existing


async def referenced_artifacts(
    ledger: EventLedger,
    evidence: EvidenceReader,
    run_id: str,
    artifacts: ArtifactStore | None = None,
) -> set[str]:
    """Every artifact digest the run's evidence points to that exists in ``artifacts`` (by
    default the ledger's own store, ``SqlLedger.artifacts``)."""
    store = artifacts if artifacts is not None else getattr(ledger, "artifacts", None)
    if store is None:
        raise InvalidInputError(
            f"run {run_id}: no artifact store to look referenced artifacts up in"
        )
    existing, _missing = await _split_existing(
        store, await collect_references(ledger, evidence, run_id)
    )
    return existing


async def freeze_evidence(
    ledger: EventLedger,
    evidence: EvidenceReader,
    artifacts: ArtifactStore,
    request: EvidenceFreezeRequest,
    *,
    freeze_id: str,
    now: datetime,
) -> FreezeRecord:
    """Verify the run's chain, hold and retain every artifact its evidence points to until
    ``request.retention_until``, and return the freeze record with the verified chain head.

    A broken chain is refused with ``ChainBrokenError`` naming the first broken sequence, and
    nothing is held: tampered evidence is never frozen as if it were clean."""
    if request.retention_until <= now:
        raise InvalidInputError(
            f"freeze {freeze_id}: retention_until {request.retention_until.isoformat()} is not "
            f"after the freeze time {now.isoformat()}"
        )
    run_id = request.run_id
    verification = await ledger.verify(run_id)
    if not verification.intact:
        raise ChainBrokenError(
            f"refusing to freeze the evidence of run {run_id} for incident "
            f"{request.incident_id}: its chain is broken at sequence {verification.broken_at}: "
            f"{verification.reason} ({verification.detail})",
            sequence=verification.broken_at,
        )
    existing, missing = await _split_existing(
        artifacts, await collect_references(ledger, evidence, run_id)
    )

    async def hold(digest: str) -> None:
        await artifacts.set_legal_hold(digest, True)
        await artifacts.set_retention(digest, request.retention_until)

    await _gather_limited(hold(d) for d in sorted(existing))
    # may ask the backend once (S3: the bucket's Object Lock configuration)
    enforced = await asyncio.to_thread(artifacts.enforced_by_backend)
    return FreezeRecord(
        freeze_id=freeze_id,
        incident_id=request.incident_id,
        run_id=run_id,
        types=request.types,
        retention_until=request.retention_until,
        chain_head_sequence=verification.head_sequence,
        chain_head_hash=verification.head_hash,
        artifact_digests=tuple(existing),
        missing_digests=tuple(missing),
        enforced_by_backend=enforced,
        created_at=now,
    )

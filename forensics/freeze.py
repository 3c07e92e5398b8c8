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
from datetime import datetime

from models import (
    EvidenceFreezeRequest,
    ExecutionEventType,
)
from models.errors import ChainBrokenError, InvalidInputError
from models.freeze import FreezeRecord
from runtime.evidence_refs import (
    collect_references,
    gather_limited,
    referenced_artifacts,
    split_existing,
)
from runtime.ports import ArtifactStore, EventLedger, EvidenceReader

__all__ = ["collect_references", "freeze_evidence", "referenced_artifacts"]

E = ExecutionEventType


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
            f"{request.incident_id}: it does not verify: {verification.summary()}",
            sequence=verification.broken_at,
        )
    existing, missing = await split_existing(
        artifacts, await collect_references(ledger, evidence, run_id)
    )

    async def hold(digest: str) -> None:
        await artifacts.set_legal_hold(digest, True)
        await artifacts.set_retention(digest, request.retention_until)

    await gather_limited(hold(d) for d in sorted(existing))
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

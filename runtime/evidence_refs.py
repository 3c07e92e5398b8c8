"""Which artifacts a run's evidence points to: read from the chain-covered event payloads (so
a row edited in a lookup table cannot hide an artifact) and from the lookup records as well.
Used by the incident freeze and by privacy operations (holds, deletion)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Iterator
from typing import Any

from models import (
    ContextSnapshot,
    ExecutionEventType,
    PromptArtifact,
    ReplayCheckpoint,
    RetrievalFixture,
)
from models.digest import is_digest
from models.errors import InvalidInputError
from runtime.ports import ArtifactStore, EventLedger, EvidenceReader, StoringLedger

__all__ = [
    "REFERENCING",
    "collect_references",
    "gather_limited",
    "referenced_artifacts",
    "refs_in",
    "split_existing",
]

E = ExecutionEventType
CAS_PREFIX = "cas:"
_DIGEST_LENGTH = len("sha256:") + 64
#: concurrent store requests (S3: one HEAD / PUT per request)
_CONCURRENCY = 16

#: events whose payloads point to artifacts
REFERENCING = frozenset(
    {
        E.RUN_STARTED,
        E.PROMPT_COMPILED,
        E.CONTEXT_SNAPSHOT,
        E.RETRIEVAL,
        E.CHECKPOINT,
        E.STEP_COMPLETED,
        E.STATE_MIGRATION,
        E.ARTIFACT,
    }
)


def refs_in(event_type: ExecutionEventType, payload: Any) -> Iterator[Any]:
    """Values of the top-level ``*_ref`` / ``*_refs`` keys of a payload (prompt ``content_ref``,
    snapshot ``message_refs``/``evidence_refs``/``memory_refs``, checkpoint ``state_ref``, step
    ``random_state_ref``/``state_ref``, migration ``raw_state_ref``/``migrated_state_ref``), the
    chunk hashes of a retrieval, the ``content_hash`` of an artifact and the ``input.*_ref`` of
    a run's start (an ingested or imported run's system prompt and tool catalogue, which its
    replays load). Other hashes (a snapshot's ``content_hash`` is its request's hash) name no
    stored object."""
    if not isinstance(payload, dict):
        return
    yield from _keyed_refs(payload)
    if event_type is E.RUN_STARTED and isinstance(payload.get("input"), dict):
        yield from _keyed_refs(payload["input"])
    elif event_type is E.ARTIFACT:
        yield payload.get("content_hash")
    elif event_type is E.RETRIEVAL and isinstance(payload.get("evidence"), list):
        for item in payload["evidence"]:
            if isinstance(item, dict):
                yield item.get("chunk_hash")


def _keyed_refs(payload: dict[str, Any]) -> Iterator[Any]:
    for key, value in payload.items():
        if key.endswith("_ref"):
            yield value
        elif key.endswith("_refs") and isinstance(value, list):
            yield from value


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
        run_id, types=REFERENCING, missing_ok=True
    ):
        if data is not None:
            try:
                found.extend(refs_in(event.type, json.loads(data)))
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


async def gather_limited(calls: Iterable[Any]) -> list[Any]:
    semaphore = asyncio.Semaphore(_CONCURRENCY)

    async def limited(call: Any) -> Any:
        async with semaphore:
            return await call

    return await asyncio.gather(*(limited(c) for c in calls))


async def split_existing(artifacts: ArtifactStore, digests: set[str]) -> tuple[set[str], set[str]]:
    ordered = sorted(digests)
    present = await gather_limited(artifacts.exists(d) for d in ordered)
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
    store = artifacts
    if store is None and isinstance(ledger, StoringLedger):
        store = ledger.artifacts
    if store is None:
        raise InvalidInputError(
            f"run {run_id}: no artifact store to look referenced artifacts up in"
        )
    existing, _missing = await split_existing(
        store, await collect_references(ledger, evidence, run_id)
    )
    return existing

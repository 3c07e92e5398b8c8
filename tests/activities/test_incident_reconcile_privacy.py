"""An incident's reconciliation in a redacted run (an ingested one: ``redact-v1`` by default).
The RECONCILED copy of a write whose idempotency key names a person carries that person's
pseudonym, so it needs its raw-payload row (else ``runs verify`` reads a deleted row on an
untouched run); a person's verdict naming someone is chained as pseudonyms, its raw form
sealed under the run's key. Real ingestion, vault, reconciler and world; SQLite and
PostgreSQL."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from activities.incident import IncidentActivities
from examples.support_desk.reconcilers import support_desk_reconcilers
from ingest import ingest_events, ingest_run
from models import ExecutionEventType, SideEffectRecord, SideEffectStatus
from models.incident_flow import SideEffectResolution
from models.ingest import IngestEventBatch, IngestRunHeader, IngestTool
from models.privacy import RawEvidenceState
from stores.artifacts import LocalArtifactStore
from stores.bundle import Stores
from stores.sql.database import Database
from stores.sql.incidents import SqlIncidentStore
from tests.runtime.privacy.conftest import PrivacyStack, make_stack

ADDRESS = "ada.lovelace@example.com"
PHONE = "+44 20 7946 0958"


@pytest.fixture
async def stack(database: Database, tmp_path: Path) -> PrivacyStack:
    return await make_stack(database, LocalArtifactStore(tmp_path / "artifacts"))


async def ingested_unknown_writes(stack: PrivacyStack) -> str:
    """An ingested run (pinning no policy: the default, ``redact-v1``) that ended with a refund
    and an e-mail open, both keyed by the customer's address: both UNKNOWN."""
    run_id = f"ingested-{uuid.uuid4().hex[:10]}"
    header = IngestRunHeader(
        run_id=run_id,
        started_at=datetime(2025, 3, 1, 9, 0, tzinfo=UTC),
        system_prompt="You refund orders and tell the customer.",
        tools=(
            IngestTool(name="payment.refund", side_effect_class="WRITE"),
            IngestTool(name="email.send", side_effect_class="WRITE"),
        ),
        labels={"agent": "refunder"},
    )
    await ingest_run(stack.ledger, stack.artifacts, header)
    events = [
        {"sequence": 1, "type": "user_message", "content": f"refund me, {ADDRESS}"},
        {
            "sequence": 2,
            "type": "tool_intent",
            "name": "payment.refund",
            "arguments": {"order_id": "O-1", "amount": 12},
            "idempotency_key": f"refund:{ADDRESS}",
            "provider_request_id": f"preq-{run_id}",
        },
        {
            "sequence": 3,
            "type": "tool_intent",
            "name": "email.send",
            "arguments": {"to": ADDRESS, "body": "refunded"},
            "idempotency_key": f"notice:{ADDRESS}",
        },
        {"sequence": 4, "type": "run_end", "status": "FAILED", "error": "worker killed"},
    ]
    batch = IngestEventBatch.model_validate({"events": events})
    await ingest_events(stack.ledger, stack.artifacts, stack.evidence, run_id, batch.events)
    assert (await stack.ledger.get_run(run_id)).pinned.redaction_policy_version == "redact-v1"
    return run_id


async def test_reconciled_copies_in_a_redacted_run_keep_it_verified_and_private(
    stack: PrivacyStack,
) -> None:
    run_id = await ingested_unknown_writes(stack)
    refund, email = sorted(
        await stack.evidence.records(SideEffectRecord, run_id), key=lambda e: e.capability_id
    )[::-1]
    assert refund.capability_id == "payment.refund" and email.capability_id == "email.send"
    assert refund.status is email.status is SideEffectStatus.UNKNOWN
    assert "<email:" in refund.idempotency_key  # the copy will carry a pseudonym
    stores = Stores(stack.db, stack.artifacts, stack.ledger, stack.evidence, privacy=stack.privacy)
    activities = IncidentActivities(
        stores, SqlIncidentStore(stack.db), lambda graph_id: support_desk_reconcilers(stack.world)
    )

    # the payment provider never filed the request: NOT applied, appended as RECONCILED
    outcome = await activities.reconcile_side_effect(run_id, refund.side_effect_id)
    assert outcome.status == "RECONCILED" and outcome.applied is False
    verification = await stack.ledger.verify(run_id)
    assert verification.intact, verification.summary()

    # a person's verdict naming the customer: chained as pseudonyms, sealed raw
    verdict = SideEffectResolution(
        side_effect_id=email.side_effect_id,
        outcome="applied",
        evidence=f"{ADDRESS} called from {PHONE}: the notice arrived",
        resolved_by="oncall",
    )
    resolved = await activities.resolve_side_effect_by_human(run_id, verdict)
    assert resolved.status == "RECONCILED" and resolved.applied is True
    verification = await stack.ledger.verify(run_id)
    assert verification.intact, verification.summary()
    record: SideEffectRecord = await stack.evidence.record(SideEffectRecord, email.side_effect_id)
    assert record.provider_receipt is not None
    assert ADDRESS not in record.provider_receipt and PHONE not in record.provider_receipt
    assert "<email:" in record.provider_receipt and "<phone:" in record.provider_receipt
    events = await stack.ledger.events(run_id)
    last = [e for e in events if e.type is ExecutionEventType.SIDE_EFFECT][-1]
    assert ADDRESS.encode() not in await stack.ledger.payload(last)
    raw = await stack.privacy.read_raw_evidence(
        run_id, last.sequence, actor="test", reason="check the sealed verdict"
    )
    assert raw.state is RawEvidenceState.AVAILABLE
    assert f"{ADDRESS} called from {PHONE}" in raw.content["provider_receipt"]

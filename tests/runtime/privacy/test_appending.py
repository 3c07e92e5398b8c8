"""Evidence appended to a redacted run after its session (``runtime.privacy.appending``): a
retry of a write proved not applied, and the UNKNOWN that settles a retry interrupted mid-call,
are sanitized under the run's pinned policy like the session's own events, so the run still
verifies and a receipt naming a person is chained as its pseudonym (its raw form sealed under
the run's key, read back by the audited forensic read). Real support-desk runs (``redact-v2``),
real vault, SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete

from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.reconcilers import support_desk_reconcilers
from examples.support_desk.spec import run_scenario, support_desk_spec
from forensics.reconcile import reconcile_side_effect
from models import (
    ExecutionEvent,
    ExecutionEventType,
    PinnedVersions,
    RunRecord,
    SideEffectRecord,
    SideEffectStatus,
)
from models.privacy import RawEvidenceState
from runtime.privacy.appending import appending_recorder, run_appender
from runtime.side_effect_retry import execute_checked_retry, retry_check
from runtime.side_effects import SideEffectLedger
from runtime.tools import ToolCallContext, ToolProvider
from stores.bundle import Stores
from stores.sql.support_desk_world import SqlWorldStore, refunds
from tests.runtime.privacy.conftest import PrivacyStack

ADDRESS = "ada.lovelace@example.com"


def stores_of(stack: PrivacyStack) -> Stores:
    return Stores(stack.db, stack.artifacts, stack.ledger, stack.evidence, privacy=stack.privacy)


async def reconciled_not_applied(stack: PrivacyStack) -> SideEffectRecord:
    """A refund-timeout run whose refund the provider then lost, reconciled NOT applied."""
    run = await run_scenario(stack.world, stack.ledger, stack.artifacts, "refund-timeout")
    (effect,) = await stack.evidence.records(SideEffectRecord, run.run_id)
    store = stack.world.store
    assert isinstance(store, SqlWorldStore)
    async with store.transaction() as conn:
        await conn.execute(
            delete(refunds).where(refunds.c.provider_request_id == effect.provider_request_id)
        )
    recorder = await run_appender(stack.ledger, stack.artifacts, run.run_id)
    result = await reconcile_side_effect(
        stack.evidence, recorder, support_desk_reconcilers(stack.world), effect.side_effect_id
    )
    assert result.record.status is SideEffectStatus.RECONCILED
    assert result.record.reconciled_applied is False
    return result.record


async def last_side_effect(stack: PrivacyStack, run_id: str) -> ExecutionEvent:
    events = await stack.ledger.events(run_id)
    return [e for e in events if e.type is ExecutionEventType.SIDE_EFFECT][-1]


async def test_a_retry_receipt_naming_a_person_is_chained_as_its_pseudonym(
    stack: PrivacyStack,
) -> None:
    effect = await reconciled_not_applied(stack)
    stores = stores_of(stack)

    async def providers_for(graph_id: str) -> dict[str, ToolProvider]:
        # the worker's providers (a world of its own), the refund's answer naming the customer
        world = SimulatedWorld(stack.world.store)
        await world.ensure()
        providers = dict(support_desk_spec(world).tool_providers)
        refund = providers["payment.refund"]

        async def refund_and_notify(arguments: dict, context: ToolCallContext) -> Any:
            answer = await refund(arguments, context)
            return {**answer, "receipt": f"{answer['refund_id']}, confirmation to {ADDRESS}"}

        providers["payment.refund"] = refund_and_notify
        return providers

    check = await retry_check(stores, effect.side_effect_id)
    result = await execute_checked_retry(stores, check, providers_for)

    assert result.status == "CONFIRMED"
    assert (await stack.ledger.verify(effect.run_id)).intact
    confirmed: SideEffectRecord = await stack.evidence.record(
        SideEffectRecord, effect.side_effect_id
    )
    assert confirmed.provider_receipt is not None and "<email:" in confirmed.provider_receipt
    assert ADDRESS not in confirmed.provider_receipt and ADDRESS not in str(result.receipt)
    event = await last_side_effect(stack, effect.run_id)
    assert ADDRESS.encode() not in await stack.ledger.payload(event)
    # the raw form is sealed under the run's key: the forensic read (audited) gives it back
    raw = await stack.privacy.read_raw_evidence(
        effect.run_id, event.sequence, actor="test", reason="check the sealed receipt"
    )
    assert raw.state is RawEvidenceState.AVAILABLE
    assert ADDRESS in raw.content["provider_receipt"]


async def test_an_interrupted_retry_settled_unknown_keeps_the_run_verified(
    stack: PrivacyStack,
) -> None:
    effect = await reconciled_not_applied(stack)
    stores = stores_of(stack)
    check = await retry_check(stores, effect.side_effect_id)
    # the first attempt recorded EXECUTING, then its worker died before the provider answered
    first = await run_appender(stack.ledger, stack.artifacts, effect.run_id)
    await SideEffectLedger(first)._transition(effect, status=SideEffectStatus.EXECUTING)

    async def no_providers(graph_id: str) -> dict[str, ToolProvider]:
        raise AssertionError("a resumed retry must not reach a provider")

    result = await execute_checked_retry(stores, check, no_providers)

    assert result.status == "UNKNOWN" and "stopped mid-call" in result.detail
    assert (await stack.ledger.verify(effect.run_id)).intact
    event = await last_side_effect(stack, effect.run_id)
    assert json.loads(await stack.ledger.payload(event))["status"] == "UNKNOWN"
    # made of sanitized evidence only: its raw-payload row says its raw form is itself, under
    # the policy the run pins (without it, a pseudonym in the copy reads as a deleted row)
    raw = await stack.vault.raw_evidence(effect.run_id, event.sequence, decrypt=False)
    assert raw.state is RawEvidenceState.SAME_AS_SANITIZED
    assert raw.redaction_policy_version == "redact-v2"


async def test_the_appender_applies_what_the_header_pins(stack: PrivacyStack) -> None:
    """The header's policy, raw forms under its primary subject; as given when it pins none."""
    start = datetime(2025, 3, 1, tzinfo=UTC)
    labels = {"subject": "customer:C-1", "tenant": "acme"}
    for pinned in (None, "none"):
        plain = RunRecord(
            run_id="r",
            graph_id="g",
            graph_version="1",
            created_at=start,
            pinned=PinnedVersions(redaction_policy_version=pinned),
            labels=labels,
        )
        assert appending_recorder(stack.ledger, stack.artifacts, plain).redaction is None
    redacted = RunRecord(
        run_id="r",
        graph_id="g",
        graph_version="1",
        created_at=start,
        pinned=PinnedVersions(redaction_policy_version="redact-v1"),
        labels=labels,
    )
    recorder = appending_recorder(stack.ledger, stack.artifacts, redacted)
    assert recorder.redaction is not None and recorder.redaction.version == "redact-v1"
    assert recorder.subject_id == "customer:C-1" and recorder.run_id == "r"
    assert recorder.hashing_view({"to": ADDRESS})["to"].startswith("<email:")

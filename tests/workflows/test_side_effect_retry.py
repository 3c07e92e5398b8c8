"""The durable retry (SideEffectRetry workflow, id = side effect id) of a write reconciled NOT
applied, on a real Temporal dev server with real workers and the real support-desk providers."""

from __future__ import annotations

import pytest
from sqlalchemy import delete, func, select

from activities.side_effects import SideEffectRetryActivities
from app.side_effects import retry_durably
from examples.support_desk.spec import run_scenario
from models import SideEffectRecord, SideEffectStatus
from models.canonical import canonical_hash
from models.errors import ReconciliationRequiredError, RetryNotAllowedError
from models.incident_flow import IncidentPhase
from models.retry_flow import RetryCheck
from runtime.recorder import RunRecorder
from runtime.side_effects import SideEffectLedger
from stores.sql.support_desk_world import refunds
from tests.workflows.test_incident_workflow import open_incident, wait_phase


async def refund_count(stack, preq: str) -> int:
    async with stack.world.store.read() as conn:
        query = select(func.count()).select_from(refunds)
        return (await conn.execute(query.where(refunds.c.provider_request_id == preq))).scalar_one()


async def lost_refund(stack, seed: int) -> SideEffectRecord:
    """A refund-timeout run whose refund the provider then lost: reconciling proves it NOT
    applied."""
    run = await run_scenario(
        stack.world, stack.stores.ledger, stack.stores.artifacts, "refund-timeout", seed=seed
    )
    (effect,) = await stack.stores.evidence.records(SideEffectRecord, run.run_id)
    async with stack.world.store.transaction() as conn:
        await conn.execute(
            delete(refunds).where(refunds.c.provider_request_id == effect.provider_request_id)
        )
    return effect


async def test_incident_retries_a_refund_reconciled_not_applied(replay_stack) -> None:
    stack = replay_stack
    effect = await lost_refund(stack, seed=6)
    unknown = effect.side_effect_id
    # UNKNOWN: refused before any workflow starts or any provider hears of it
    with pytest.raises(ReconciliationRequiredError):
        await retry_durably(lambda: _client(stack), stack.stores, unknown)

    handle = await open_incident(stack, effect.run_id, repeat=1, retry_not_applied=True)
    view = await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION)
    (retried,) = view.retries
    assert retried.side_effect_id == unknown and retried.status == "CONFIRMED"
    assert any(f"{unknown} retried: CONFIRMED" in e.detail for e in view.timeline)
    assert effect.provider_request_id is not None
    assert await refund_count(stack, effect.provider_request_id) == 1
    record = await stack.stores.evidence.record(SideEffectRecord, unknown)
    assert record.status is SideEffectStatus.CONFIRMED
    assert record.idempotency_key == effect.idempotency_key
    described = await stack.client.get_workflow_handle(unknown).describe()
    assert described.workflow_type == "SideEffectRetry"
    # a second retry (CLI, API) is refused: the write is applied now
    with pytest.raises(RetryNotAllowedError):
        await retry_durably(lambda: _client(stack), stack.stores, unknown)
    assert (await stack.stores.ledger.verify(effect.run_id)).intact
    await handle.terminate("test done")


async def test_a_retry_interrupted_mid_call_ends_unknown_never_called_twice(replay_stack) -> None:
    stack = replay_stack
    effect = await lost_refund(stack, seed=7)
    recorder = RunRecorder(stack.stores.ledger, stack.stores.artifacts, effect.run_id)
    ledger = SideEffectLedger(recorder)
    reconciled = await ledger._transition(
        effect, status=SideEffectStatus.RECONCILED, reconciled_applied=False
    )
    check = RetryCheck(
        side_effect_id=effect.side_effect_id,
        run_id=effect.run_id,
        capability_id=effect.capability_id,
        status="RECONCILED",
        record_hash=canonical_hash(reconciled.model_dump(mode="json")),
    )
    # the first attempt recorded EXECUTING, then its worker died before the provider answered
    await ledger._transition(reconciled, status=SideEffectStatus.EXECUTING)
    calls = await stack.world.call_count("payments", "refund")

    async def no_providers(graph_id: str):
        raise AssertionError("a resumed retry must not reach a provider")

    activities = SideEffectRetryActivities(stack.stores, no_providers)
    result = await activities.execute_side_effect_retry(check)
    assert result.status == "UNKNOWN" and "stopped mid-call" in result.detail
    assert await stack.world.call_count("payments", "refund") == calls
    record = await stack.stores.evidence.record(SideEffectRecord, effect.side_effect_id)
    assert record.status is SideEffectStatus.UNKNOWN
    # and once more: the UNKNOWN it left is final for this retry
    again = await activities.execute_side_effect_retry(check)
    assert again.status == "UNKNOWN"


async def _client(stack):
    return stack.client

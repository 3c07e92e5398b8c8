"""Reconciling UNKNOWN side effects against the simulated providers (rule 5), on SQLite and
PostgreSQL: the provider is asked read-only, the answer is chained as RECONCILED, only an
effect proved not applied is retried (with its original idempotency key)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import delete, func, select

from examples.support_desk.reconcilers import (
    EmailReconciler,
    PaymentReconciler,
    support_desk_reconcilers,
)
from examples.support_desk.spec import run_scenario
from forensics.reconcile import (
    ReconciliationOutcome,
    ReconciliationResult,
    SideEffectReconciler,
    reconcile_side_effect,
    resolve_by_human,
)
from models import ExecutionEventType, SideEffectRecord, SideEffectStatus, ToolFixture
from models.errors import (
    ConflictError,
    InvalidInputError,
    ReconciliationRequiredError,
    RetryNotAllowedError,
)
from runtime.recorder import RunRecorder
from runtime.side_effects import retry_side_effect
from runtime.tools import ToolCallContext
from stores.sql.support_desk_world import SqlWorldStore, refunds
from tests.runtime.conftest import Recording


async def _timeout_run(rec: Recording, seed: int = 3) -> tuple[str, SideEffectRecord]:
    result = await run_scenario(rec.world, rec.ledger, rec.artifacts, "refund-timeout", seed=seed)
    (effect,) = await rec.evidence.records(SideEffectRecord, result.run_id)
    assert effect.status is SideEffectStatus.UNKNOWN
    return result.run_id, effect


async def _statuses(rec: Recording, run_id: str) -> list[str]:
    rows = await rec.ledger.events_with_payloads(
        run_id, types=frozenset({ExecutionEventType.SIDE_EFFECT})
    )
    return [json.loads(data or b"{}")["status"] for _, data in rows]


def _world(rec: Recording) -> SqlWorldStore:
    """The provider's own database (these tests read and change it behind the agent)."""
    store = rec.world.store
    assert isinstance(store, SqlWorldStore)
    return store


async def _refunds_for(rec: Recording, preq: str | None) -> list[Any]:
    async with _world(rec).read() as conn:
        rows = await conn.execute(select(refunds).where(refunds.c.provider_request_id == preq))
        return list(rows.all())


async def _intact(rec: Recording, run_id: str) -> None:
    assert (await rec.ledger.verify(run_id)).intact


async def _never(key: str, preq: str) -> dict:
    raise AssertionError("the provider must not be reached")


async def test_refund_that_was_applied_reconciles_applied_and_is_never_retried(
    rec: Recording,
) -> None:
    run_id, effect = await _timeout_run(rec)
    recorder = RunRecorder(rec.ledger, rec.artifacts, run_id)
    refund_calls = await rec.world.call_count("payments", "refund")
    lookups = await rec.world.call_count("payments", "lookup")

    done = await reconcile_side_effect(
        rec.evidence, recorder, support_desk_reconcilers(rec.world), effect.side_effect_id
    )
    assert not done.needs_human and done.reconciler == "payments"
    assert done.result is not None and done.result.outcome is ReconciliationOutcome.APPLIED
    (row,) = await _refunds_for(rec, effect.provider_request_id)  # exactly one refund
    stored = await rec.evidence.record(SideEffectRecord, effect.side_effect_id)
    assert stored == done.record
    assert stored.status is SideEffectStatus.RECONCILED and stored.reconciled_applied is True
    assert stored.provider_receipt and row.refund_id in stored.provider_receipt
    assert stored.idempotency_key == effect.idempotency_key == row.idempotency_key
    assert await rec.world.call_count("payments", "refund") == refund_calls
    assert await rec.world.call_count("payments", "lookup") == lookups + 1
    assert await _statuses(rec, run_id) == ["PLANNED", "EXECUTING", "UNKNOWN", "RECONCILED"]
    await _intact(rec, run_id)

    # repeating it (a retried activity) changes nothing and does not ask again
    again = await reconcile_side_effect(
        rec.evidence, recorder, support_desk_reconcilers(rec.world), effect.side_effect_id
    )
    assert again.record == stored and not again.needs_human and again.result is None
    assert len(await _statuses(rec, run_id)) == 4

    with pytest.raises(RetryNotAllowedError, match="applied"):
        await retry_side_effect(rec.evidence, recorder, effect.side_effect_id, _never)
    assert await rec.world.call_count("payments", "refund") == refund_calls
    assert len(await _refunds_for(rec, effect.provider_request_id)) == 1
    await _intact(rec, run_id)


async def test_refund_missing_at_the_provider_is_retried_once_with_its_original_key(
    rec: Recording,
) -> None:
    run_id, effect = await _timeout_run(rec, seed=4)
    recorder = RunRecorder(rec.ledger, rec.artifacts, run_id)
    # the provider's state, not evidence: the refund never happened there
    async with _world(rec).transaction() as conn:
        await conn.execute(
            delete(refunds).where(refunds.c.provider_request_id == effect.provider_request_id)
        )
    with pytest.raises(ReconciliationRequiredError):
        await retry_side_effect(rec.evidence, recorder, effect.side_effect_id, _never)

    done = await reconcile_side_effect(
        rec.evidence, recorder, support_desk_reconcilers(rec.world), effect.side_effect_id
    )
    assert done.result is not None and done.result.outcome is ReconciliationOutcome.NOT_APPLIED
    assert done.record.status is SideEffectStatus.RECONCILED
    assert done.record.reconciled_applied is False
    await _intact(rec, run_id)

    (fixture,) = [
        f
        for f in await rec.evidence.records(ToolFixture, run_id)
        if f.provider_request_id == effect.provider_request_id
    ]
    arguments = dict(fixture.sanitized_request)
    rec.world.drop_refund_response_for.discard(arguments["order_id"])  # the provider recovered
    keys: list[str] = []

    async def call(key: str, preq: str) -> dict:
        keys.append(key)
        context = ToolCallContext(run_id, datetime.now(UTC), key, preq)
        return await rec.world.payment_refund(arguments, context)

    retried, receipt = await retry_side_effect(rec.evidence, recorder, effect.side_effect_id, call)
    assert keys == [effect.idempotency_key]
    assert retried.status is SideEffectStatus.CONFIRMED and receipt is not None
    (row,) = await _refunds_for(rec, effect.provider_request_id)
    assert row.idempotency_key == effect.idempotency_key and row.refund_id == receipt["refund_id"]
    async with _world(rec).read() as conn:
        per_order = (
            await conn.execute(
                select(func.count())
                .select_from(refunds)
                .where(refunds.c.order_id == arguments["order_id"])
            )
        ).scalar_one()
    assert per_order == 1
    assert await _statuses(rec, run_id) == [
        "PLANNED",
        "EXECUTING",
        "UNKNOWN",
        "RECONCILED",
        "EXECUTING",
        "CONFIRMED",
    ]
    await _intact(rec, run_id)


class _Inconclusive:
    name = "flaky-provider"

    def supports(self, capability_id: str) -> bool:
        return True

    async def reconcile(self, record: SideEffectRecord) -> ReconciliationResult:
        return ReconciliationResult(
            outcome=ReconciliationOutcome.INCONCLUSIVE, evidence="the lookup API answered 'pending'"
        )


async def test_no_reconciler_or_an_inconclusive_one_leaves_it_to_a_human(rec: Recording) -> None:
    run_id, effect = await _timeout_run(rec, seed=5)
    recorder = RunRecorder(rec.ledger, rec.artifacts, run_id)
    before = await _statuses(rec, run_id)
    assert isinstance(_Inconclusive(), SideEffectReconciler)

    nobody = await reconcile_side_effect(
        rec.evidence, recorder, [EmailReconciler(rec.world.lookup_email)], effect.side_effect_id
    )
    assert nobody.needs_human and nobody.reconciler is None and nobody.result is None
    assert nobody.record == effect and "payment.refund" in nobody.reason

    unsure = await reconcile_side_effect(
        rec.evidence, recorder, [_Inconclusive()], effect.side_effect_id
    )
    assert unsure.needs_human and unsure.reconciler == "flaky-provider"
    assert unsure.record == effect and "pending" in unsure.reason
    assert await _statuses(rec, run_id) == before  # nothing recorded
    assert (await rec.evidence.record(SideEffectRecord, effect.side_effect_id)) == effect
    await _intact(rec, run_id)


async def test_resolve_by_human_records_who_decided_on_what_evidence(rec: Recording) -> None:
    run_id, effect = await _timeout_run(rec, seed=6)
    recorder = RunRecorder(rec.ledger, rec.artifacts, run_id)
    with pytest.raises(InvalidInputError, match="evidence"):
        await resolve_by_human(
            rec.evidence,
            recorder,
            effect.side_effect_id,
            applied=True,
            evidence_text=" ",
            resolved_by="dana",
        )
    resolved = await resolve_by_human(
        rec.evidence,
        recorder,
        effect.side_effect_id,
        applied=True,
        evidence_text="bank statement line 2026-08-20 shows the refund",
        resolved_by="dana@acme",
    )
    assert resolved.status is SideEffectStatus.RECONCILED and resolved.reconciled_applied is True
    assert resolved.provider_receipt == (
        "resolved by dana@acme: applied; bank statement line 2026-08-20 shows the refund"
    )
    assert (await rec.evidence.record(SideEffectRecord, effect.side_effect_id)) == resolved
    await _intact(rec, run_id)

    same = await resolve_by_human(
        rec.evidence,
        recorder,
        effect.side_effect_id,
        applied=True,
        evidence_text="again",
        resolved_by="dana@acme",
    )
    assert same == resolved
    with pytest.raises(ConflictError, match="already RECONCILED applied"):
        await resolve_by_human(
            rec.evidence,
            recorder,
            effect.side_effect_id,
            applied=False,
            evidence_text="no",
            resolved_by="eve",
        )
    with pytest.raises(RetryNotAllowedError):
        await retry_side_effect(rec.evidence, recorder, effect.side_effect_id, _never)
    assert await _statuses(rec, run_id) == ["PLANNED", "EXECUTING", "UNKNOWN", "RECONCILED"]
    await _intact(rec, run_id)


async def test_only_unknown_effects_of_the_recorders_run_are_reconciled(rec: Recording) -> None:
    happy = await run_scenario(rec.world, rec.ledger, rec.artifacts, "happy", seed=1)
    effects = {
        e.capability_id: e for e in await rec.evidence.records(SideEffectRecord, happy.run_id)
    }
    email = effects["email.send"]
    assert email.status is SideEffectStatus.CONFIRMED
    recorder = RunRecorder(rec.ledger, rec.artifacts, happy.run_id)
    with pytest.raises(ConflictError, match="only an UNKNOWN"):
        await reconcile_side_effect(
            rec.evidence, recorder, support_desk_reconcilers(rec.world), email.side_effect_id
        )
    other_run, unknown = await _timeout_run(rec, seed=8)
    with pytest.raises(InvalidInputError, match="belongs to run"):
        await reconcile_side_effect(
            rec.evidence, recorder, support_desk_reconcilers(rec.world), unknown.side_effect_id
        )
    await _intact(rec, happy.run_id)
    await _intact(rec, other_run)

    # the reconcilers themselves, read-only, on the provider's real answers
    emails = EmailReconciler(rec.world.lookup_email)
    found = await emails.reconcile(email)
    assert found.outcome is ReconciliationOutcome.APPLIED and found.provider_receipt
    missing = email.model_copy(update={"provider_request_id": "preq-nobody"})
    assert (await emails.reconcile(missing)).outcome is ReconciliationOutcome.INCONCLUSIVE
    payments = PaymentReconciler(rec.world.lookup_refund)
    mismatch = unknown.model_copy(update={"idempotency_key": "idem-someone-else"})
    assert (await payments.reconcile(mismatch)).outcome is ReconciliationOutcome.INCONCLUSIVE
    no_id = unknown.model_copy(update={"provider_request_id": None})
    assert (await payments.reconcile(no_id)).outcome is ReconciliationOutcome.INCONCLUSIVE

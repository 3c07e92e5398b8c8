"""Failure facts read from real recorded runs of the support desk, and the signatures they
sign, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from examples.support_desk.agent import SCENARIOS
from examples.support_desk.reconcilers import support_desk_reconcilers
from examples.support_desk.spec import run_scenario, support_desk_spec
from forensics.failure_facts import gather_failure_facts
from forensics.reconcile import reconcile_side_effect
from models import AgentFailureType, SideEffectRecord, SideEffectStatus, ToolFixture
from models.errors import ApprovalDeniedError
from models.signatures import FailureFacts, classify
from runtime.recorder import RunRecorder
from runtime.session import record_run
from runtime.side_effects import SideEffectLedger
from runtime.tools import ToolCallContext
from tests.runtime.conftest import Recording


async def _facts(rec: Recording, run_id: str) -> FailureFacts:
    return await gather_failure_facts(rec.ledger, rec.evidence, run_id)


async def test_wrong_customer_under_v17_is_a_nonunique_lookup_then_a_wrong_recipient(
    rec: Recording,
) -> None:
    run = await run_scenario(rec.world, rec.ledger, rec.artifacts, "wrong-customer", seed=0)
    assert run.outcome["emailed"] == "bob@example.com"
    facts = await _facts(rec, run.run_id)
    (lookup,) = facts.nonunique_lookups
    assert lookup.model_dump() == {
        "capability_id": "crm.find_by_phone",
        "key_names": ("phone",),
        "match_count": 2,
        "id_field": "customer_id",
        "asked_id": "C-2002",
        "taken_id": "C-2001",
        "write_capability_id": "email.send",
        "write_field": "to",
    }
    assert facts.completed and facts.run_error_type is None
    outcome: Any = facts.outcome
    assert outcome["customer_id"] == "C-2001"
    (email,) = facts.side_effects
    assert email.final_status is SideEffectStatus.CONFIRMED and not email.retry_attempted
    result = classify(facts)
    assert result.signature == "DATA_NONUNIQUE_LOOKUP_WRONG_RECIPIENT"
    assert result.failure_type is AgentFailureType.DATA

    # a second incident of the same kind: other run, ids and times, same signature
    again = await run_scenario(rec.world, rec.ledger, rec.artifacts, "wrong-customer", seed=1)
    assert again.outcome["emailed"] == "bob@example.com"
    assert classify(await _facts(rec, again.run_id)) == result


@pytest.mark.parametrize(("prompt", "seed"), [("v17", 5), ("v18", 0)])
async def test_a_lookup_by_id_is_no_nonunique_lookup(
    rec: Recording, prompt: str, seed: int
) -> None:
    run = await run_scenario(
        rec.world, rec.ledger, rec.artifacts, "wrong-customer", prompt_version=prompt, seed=seed
    )
    assert run.outcome["emailed"] == "carol@example.com"
    facts = await _facts(rec, run.run_id)
    assert facts.nonunique_lookups == ()
    assert classify(facts).signature == "MODEL_DECISION_UNEXPLAINED"


async def test_refund_timeout_signs_the_same_before_and_after_reconciliation(
    rec: Recording,
) -> None:
    runs = [
        await run_scenario(rec.world, rec.ledger, rec.artifacts, "refund-timeout", seed=s)
        for s in (1, 2)
    ]
    results = []
    for run in runs:
        facts = await _facts(rec, run.run_id)
        (refund,) = facts.side_effects
        assert refund.capability_id == "payment.refund"
        assert refund.final_status is SideEffectStatus.UNKNOWN and refund.outcome_was_unknown
        assert not refund.retry_attempted and refund.duplicated is False
        results.append(classify(facts))
    assert results[0] == results[1]
    assert results[0].signature == "SIDE_EFFECT_UNKNOWN_NO_RETRY"

    recorder = RunRecorder(rec.ledger, rec.artifacts, runs[0].run_id)
    (effect_id,) = (await _facts(rec, runs[0].run_id)).side_effects[0].side_effect_ids
    await reconcile_side_effect(
        rec.evidence, recorder, support_desk_reconcilers(rec.world), effect_id
    )
    after = await _facts(rec, runs[0].run_id)
    assert after.side_effects[0].final_status is SideEffectStatus.RECONCILED
    assert after.side_effects[0].reconciled_applied is True
    assert classify(after) == results[0]


async def test_an_unknown_refund_retried_under_a_new_key_is_a_duplicate(rec: Recording) -> None:
    run = await run_scenario(rec.world, rec.ledger, rec.artifacts, "refund-timeout", seed=9)
    (effect,) = await rec.evidence.records(SideEffectRecord, run.run_id)
    (fixture,) = [
        f
        for f in await rec.evidence.records(ToolFixture, run.run_id)
        if f.provider_request_id == effect.provider_request_id
    ]
    arguments: dict[str, Any] = dict(fixture.sanitized_request)
    rec.world.drop_refund_response_for.discard(arguments["order_id"])
    recorder = RunRecorder(rec.ledger, rec.artifacts, run.run_id)

    async def send(key: str, preq: str) -> dict:
        context = ToolCallContext(run.run_id, datetime.now(UTC), key, preq)
        return await rec.world.payment_refund(arguments, context)

    # what the seed's agent did: the same refund again from another step, so under a new key
    retry, _ = await SideEffectLedger(recorder).execute(
        capability_id="payment.refund",
        step_id="refund-retry",
        action_hash=effect.action_hash,
        call=send,
    )
    assert retry.status is SideEffectStatus.CONFIRMED
    assert retry.idempotency_key != effect.idempotency_key

    unresolved = await _facts(rec, run.run_id)
    (refund,) = unresolved.side_effects
    assert refund.side_effect_ids == (effect.side_effect_id, retry.side_effect_id)
    assert refund.retry_attempted and refund.duplicated is None
    assert classify(unresolved).signature == "SIDE_EFFECT_UNKNOWN_RETRY_UNRESOLVED"

    await reconcile_side_effect(
        rec.evidence, recorder, support_desk_reconcilers(rec.world), effect.side_effect_id
    )
    facts = await _facts(rec, run.run_id)
    assert facts.side_effects[0].duplicated is True
    result = classify(facts)
    assert result.signature == "SIDE_EFFECT_UNKNOWN_RETRY_DUPLICATE"
    assert result.qualifier == "payment.refund"
    assert (await rec.ledger.verify(run.run_id)).intact


async def _desk_run(rec: Recording, **ticket_changes: Any) -> tuple[str, Any]:
    """The happy ticket with changes, recorded with an approver who denies when asked to."""
    suffix = uuid.uuid4().hex[:6]
    ticket = {**SCENARIOS["happy"], "ticket_id": f"T-{suffix}", "order_id": f"O-{suffix}"}
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    spec = support_desk_spec(rec.world, deny_approvals=True)
    try:
        result = await record_run(
            spec,
            rec.ledger,
            rec.artifacts,
            run_id=run_id,
            agent_input={**ticket, **ticket_changes},
            seed=0,
        )
    except ApprovalDeniedError as exc:
        return run_id, exc
    return run_id, result


async def test_approval_refusal_and_policy_denial(rec: Recording) -> None:
    run_id, raised = await _desk_run(rec)  # 80 EUR: needs an approval, which is denied
    assert isinstance(raised, ApprovalDeniedError)
    facts = await _facts(rec, run_id)
    assert not facts.completed and facts.run_error_type == "ApprovalDeniedError"
    assert [(r.capability_id, r.error) for r in facts.approval_refusals] == [
        ("payment.refund", "ApprovalDeniedError")
    ]
    assert facts.side_effects == ()  # refused before the ledger planned anything
    result = classify(facts)
    assert (result.signature, result.qualifier) == ("APPROVAL_DENIED", "payment.refund")

    run_id, _ = await _desk_run(rec, amount=900)  # above the limit: denied, not attempted
    facts = await _facts(rec, run_id)
    assert facts.completed
    (denial,) = facts.policy_denials
    assert denial.model_dump() == {
        "policy_id": "outbound-actions",
        "capability_id": "payment.refund",
        "attempted": False,
    }
    assert classify(facts).signature == "POLICY_DENIED_ACTION"

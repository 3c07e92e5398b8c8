"""The reference agent recorded live: every scenario, 20 seeds, on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select

from examples.support_desk.spec import run_scenario, support_desk_spec
from models import (
    ContextSnapshot,
    ExecutionEventType,
    PromptArtifact,
    SideEffectRecord,
    SideEffectStatus,
    ToolFixture,
)
from models.errors import ReconciliationRequiredError
from runtime.completeness import evidence_completeness
from runtime.recorder import RunRecorder
from runtime.side_effects import retry_side_effect
from runtime.tools import request_hash
from stores.sql.support_desk_world import refunds

SEEDS = range(20)


async def _payloads(rec, run_id: str, type_: ExecutionEventType) -> list[dict]:
    events = [e for e in await rec.ledger.events(run_id) if e.type is type_]
    return [json.loads(await rec.ledger.payload(e)) for e in events]


@pytest.mark.parametrize("scenario", ["happy", "wrong-customer", "refund-timeout"])
async def test_each_scenario_is_complete_evidence_for_20_seeds(rec, scenario: str) -> None:
    for seed in SEEDS:
        result = await run_scenario(rec.world, rec.ledger, rec.artifacts, scenario, seed=seed)
        run_id = result.run_id
        assert (await rec.ledger.verify(run_id)).intact
        completeness = await evidence_completeness(rec.ledger, rec.evidence, rec.artifacts, run_id)
        assert completeness.summary() == "6/6", (seed, completeness.reasons)

        prompts = {p.artifact_id: p for p in await rec.evidence.records(PromptArtifact, run_id)}
        contexts = {c.snapshot_id for c in await rec.evidence.records(ContextSnapshot, run_id)}
        model_calls = await _payloads(rec, run_id, ExecutionEventType.MODEL_CALL)
        assert model_calls
        for call in model_calls:
            prompt = prompts[call["prompt_artifact_id"]]
            text = await rec.artifacts.get(prompt.content_ref)
            assert prompt.compiled_hash == prompt.content_ref and text.startswith(b"ROLE: ")
            assert call["context_snapshot_id"] in contexts

        fixtures = await _payloads(rec, run_id, ExecutionEventType.TOOL_CALL)
        assert len(fixtures) == len(await rec.evidence.records(ToolFixture, run_id)) >= 1
        for fixture in fixtures:
            assert fixture["request_hash"] == request_hash(
                fixture["capability_id"], fixture["sanitized_request"]
            )

        run = await rec.ledger.get_run(run_id)
        assert (
            run.graph_version == "1" and run.pinned.prompt_bundle_hash and run.pinned.policy_version
        )
        assert run.environment is not None and run.environment.python_version
        assert run.source_code is not None and run.source_code.head_commit


async def test_wrong_customer_under_v17_mostly_emails_the_phone_match(rec) -> None:
    wrong = 0
    for seed in SEEDS:
        result = await run_scenario(
            rec.world, rec.ledger, rec.artifacts, "wrong-customer", seed=seed
        )
        wrong += result.outcome["emailed"] != "carol@example.com"
    # the scripted model looks up by phone with probability 0.8 under v17
    assert 10 <= wrong <= 20


async def test_wrong_customer_under_v18_always_emails_the_right_customer(rec) -> None:
    for seed in SEEDS:
        result = await run_scenario(
            rec.world, rec.ledger, rec.artifacts, "wrong-customer", prompt_version="v18", seed=seed
        )
        assert result.outcome["emailed"] == "carol@example.com"
        assert result.outcome["customer_id"] == "C-2002"


async def test_same_seed_same_decisions_different_seeds_differ(rec) -> None:
    seeds = range(8)
    first = [
        (
            await run_scenario(rec.world, rec.ledger, rec.artifacts, "wrong-customer", seed=s)
        ).outcome["customer_id"]
        for s in seeds
    ]
    again = [
        (
            await run_scenario(rec.world, rec.ledger, rec.artifacts, "wrong-customer", seed=s)
        ).outcome["customer_id"]
        for s in seeds
    ]
    assert first == again
    assert len(set(first)) == 2


async def test_refund_timeout_is_unknown_applied_once_and_never_retried(rec) -> None:
    result = await run_scenario(rec.world, rec.ledger, rec.artifacts, "refund-timeout", seed=7)
    (effect,) = await rec.evidence.records(SideEffectRecord, result.run_id)
    assert effect.status is SideEffectStatus.UNKNOWN and effect.capability_id == "payment.refund"
    statuses = [
        p["status"] for p in await _payloads(rec, result.run_id, ExecutionEventType.SIDE_EFFECT)
    ]
    assert statuses == ["PLANNED", "EXECUTING", "UNKNOWN"]

    async with rec.world.store.read() as conn:
        applied = (
            await conn.execute(
                select(func.count())
                .select_from(refunds)
                .where(refunds.c.provider_request_id == effect.provider_request_id)
            )
        ).scalar_one()
    assert applied == 1  # the provider did refund, exactly once

    calls_before = await rec.world.call_count("payments")
    providers = support_desk_spec(rec.world).tool_providers
    recorder = RunRecorder(rec.ledger, rec.artifacts, result.run_id)

    async def call(key: str, preq: str) -> dict:
        raise AssertionError("the provider must not be reached")

    with pytest.raises(ReconciliationRequiredError, match="reconciliation required"):
        await retry_side_effect(rec.evidence, recorder, effect.side_effect_id, call)
    assert await rec.world.call_count("payments") == calls_before
    assert providers  # the live providers exist; they were simply never called
    assert (await rec.ledger.verify(result.run_id)).intact

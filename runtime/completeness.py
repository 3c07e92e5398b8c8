"""Gathering the facts evidence completeness is judged on (``models.completeness``)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from models import (
    ApprovalRecord,
    ContextSnapshot,
    ExecutionEvent,
    ExecutionEventType,
    PolicyDecision,
    PolicyDecisionRecord,
    PromptArtifact,
    SideEffectRecord,
)
from models.completeness import CompletenessFacts, EvidenceCompleteness, score_completeness
from models.evidence import resolvable_snapshots
from runtime.ports import ArtifactStore, EventLedger, EvidenceReader


async def gather_completeness_facts(
    ledger: EventLedger,
    evidence: EvidenceReader,
    artifacts: ArtifactStore,
    run_id: str,
    loaded: Sequence[tuple[ExecutionEvent, bytes | None]] | None = None,
) -> CompletenessFacts:
    """``loaded``: the run's events with their payloads (``missing_ok``) when the caller has
    read them already (the console's timeline), else read here."""
    run = await ledger.get_run(run_id)
    if loaded is None:
        loaded = await ledger.events_with_payloads(
            run_id,
            types=frozenset({ExecutionEventType.MODEL_CALL, ExecutionEventType.TOOL_CALL}),
            missing_ok=True,
        )
    prompts = {p.artifact_id: p for p in await evidence.records(PromptArtifact, run_id)}
    # a snapshot that continues another counts only when its whole message list resolves
    contexts = resolvable_snapshots(await evidence.records(ContextSnapshot, run_id))
    effects = await evidence.records(SideEffectRecord, run_id)
    decisions = await evidence.records(PolicyDecisionRecord, run_id)
    approvals = {a.action_hash for a in await evidence.records(ApprovalRecord, run_id)}

    model_calls = with_prompt = with_context = 0
    for event, data in loaded:
        if event.type is not ExecutionEventType.MODEL_CALL:
            continue
        model_calls += 1
        if data is None:  # destroyed or corrupted: the call counts, its evidence does not
            continue
        payload = json.loads(data)
        prompt = prompts.get(payload.get("prompt_artifact_id"))
        if prompt is not None and await artifacts.exists(prompt.content_ref):
            with_prompt += 1
        if payload.get("context_snapshot_id") in contexts:
            with_context += 1
    tool_calls = with_fixture = 0
    for event, data in loaded:
        if event.type is ExecutionEventType.TOOL_CALL:
            tool_calls += 1
            if data is None:
                continue
            payload = json.loads(data)
            if (
                isinstance(payload, dict)
                and payload.get("request_hash")
                and "sanitized_response" in payload
            ):
                with_fixture += 1
    decided = {d.input_hash: d for d in decisions}
    required = [d for d in decisions if d.decision is PolicyDecision.REQUIRE_APPROVAL]
    return CompletenessFacts(
        model_calls=model_calls,
        model_calls_with_prompt=with_prompt,
        model_calls_with_context=with_context,
        tool_calls=tool_calls,
        tool_calls_with_fixture=with_fixture,
        write_actions=len(effects),
        write_actions_with_policy=sum(1 for e in effects if e.action_hash in decided),
        policy_version_pinned=run.pinned.policy_version is not None,
        approvals_required=len(required),
        approvals_recorded=sum(1 for d in required if d.input_hash in approvals),
        environment_recorded=run.environment is not None
        and run.environment.python_version is not None,
    )


async def evidence_completeness(
    ledger: EventLedger,
    evidence: EvidenceReader,
    artifacts: ArtifactStore,
    run_id: str,
    loaded: Sequence[tuple[ExecutionEvent, bytes | None]] | None = None,
) -> EvidenceCompleteness:
    return score_completeness(
        await gather_completeness_facts(ledger, evidence, artifacts, run_id, loaded)
    )

"""Everything a replay needs from its source run, loaded once through the storage ports."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from models import (
    ApprovalRecord,
    ExecutionEventType,
    PolicyDecisionRecord,
    ReplayCheckpoint,
    RetrievalFixture,
    RunRecord,
    SideEffectRecord,
    ToolFixture,
)
from models.base import Instant
from models.model_call import ModelResponse
from runtime.ports import ArtifactStore, EventLedger, EvidenceReader

E = ExecutionEventType


@dataclass
class StepMarks:
    """How much of each recorded stream had been used when a step finished (for forks)."""

    model_calls: int = 0
    clock_reads: int = 0
    fixtures: dict[str, int] = field(default_factory=dict)
    retrievals: dict[str, int] = field(default_factory=dict)
    next_step: str | None = None
    random_state_ref: str | None = None
    #: the sequence of the step's STEP_COMPLETED event
    sequence: int = 0


@dataclass
class SourceEvidence:
    run: RunRecord
    agent_input: Any
    seed: int
    start_time: datetime
    model_responses: list[ModelResponse]
    clock_reads: list[datetime]
    fixtures: dict[str, list[ToolFixture]]
    retrievals: dict[str, list[RetrievalFixture]]
    approvals: dict[str, ApprovalRecord]
    policy_decisions: dict[str, PolicyDecisionRecord]
    side_effects: dict[str, SideEffectRecord]
    checkpoints: dict[str, ReplayCheckpoint]
    #: per completed step (last occurrence), the stream positions after it
    marks: dict[str, StepMarks]
    steps: list[str]
    event_count: int


async def load_source_evidence(
    ledger: EventLedger, evidence: EvidenceReader, artifacts: ArtifactStore, run_id: str
) -> SourceEvidence:
    run = await ledger.get_run(run_id)
    loaded = await ledger.events_with_payloads(run_id, types=frozenset(_INTERESTING))
    responses: list[ModelResponse] = []
    reads: list[datetime] = []
    fixtures: dict[str, list[ToolFixture]] = {}
    retrievals: dict[str, list[RetrievalFixture]] = {}
    effects: dict[str, SideEffectRecord] = {}
    marks: dict[str, StepMarks] = {}
    steps: list[str] = []
    agent_input: Any = None
    seed = 0
    start = loaded[0][0].logical_time if loaded else run.created_at
    ended = False
    fixture_counts: dict[str, int] = {}
    retrieval_counts: dict[str, int] = {}
    for event, data in loaded:
        payload = json.loads(data or b"{}")
        if event.type is E.RUN_STARTED:
            agent_input, seed = payload.get("input"), int(payload.get("seed") or 0)
        elif event.type is E.MODEL_CALL:
            responses.append(ModelResponse.model_validate(payload["response"]))
        elif event.type is E.CLOCK_READ:
            reads.append(_parse_instant(payload["value"]))
        elif event.type is E.TOOL_CALL:
            fixture = ToolFixture.model_validate(payload)
            fixtures.setdefault(fixture.request_hash, []).append(fixture)
            fixture_counts[fixture.request_hash] = fixture_counts.get(fixture.request_hash, 0) + 1
        elif event.type is E.RETRIEVAL:
            retrieval = RetrievalFixture.model_validate(payload)
            retrievals.setdefault(retrieval.query_hash, []).append(retrieval)
            retrieval_counts[retrieval.query_hash] = (
                retrieval_counts.get(retrieval.query_hash, 0) + 1
            )
        elif event.type is E.SIDE_EFFECT and not ended:
            # what the agent saw during the run; a later reconciliation (appended after the
            # run ended) must not change what a replay of the run is answered
            record = SideEffectRecord.model_validate(payload)
            effects[record.action_hash] = record
        elif event.type in (E.RUN_COMPLETED, E.RUN_FAILED):
            ended = True
        elif event.type is E.STEP_STARTED:
            steps.append(event.step_id)
        elif event.type is E.STEP_COMPLETED:
            marks[event.step_id] = StepMarks(
                model_calls=len(responses),
                clock_reads=len(reads),
                fixtures=dict(fixture_counts),
                retrievals=dict(retrieval_counts),
                next_step=payload.get("next"),
                random_state_ref=payload.get("random_state_ref"),
                sequence=event.sequence,
            )
    approvals = {a.action_hash: a for a in await evidence.records(ApprovalRecord, run_id)}
    decisions = {d.input_hash: d for d in await evidence.records(PolicyDecisionRecord, run_id)}
    checkpoints = {c.step_id: c for c in await evidence.records(ReplayCheckpoint, run_id)}
    return SourceEvidence(
        run=run,
        agent_input=agent_input,
        seed=seed,
        start_time=start,
        model_responses=responses,
        clock_reads=reads,
        fixtures=fixtures,
        retrievals=retrievals,
        approvals=approvals,
        policy_decisions=decisions,
        side_effects=effects,
        checkpoints=checkpoints,
        marks=marks,
        steps=steps,
        # the run's last event (RUN_COMPLETED/RUN_FAILED) is among those loaded
        event_count=loaded[-1][0].sequence if loaded else 0,
    )


_INTERESTING = {
    E.RUN_STARTED,
    E.MODEL_CALL,
    E.CLOCK_READ,
    E.TOOL_CALL,
    E.RETRIEVAL,
    E.SIDE_EFFECT,
    E.STEP_STARTED,
    E.STEP_COMPLETED,
    E.RUN_COMPLETED,
    E.RUN_FAILED,
}


_INSTANT = TypeAdapter(Instant)


def _parse_instant(text: str) -> datetime:
    return _INSTANT.validate_python(text)

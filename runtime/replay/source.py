"""Everything a replay needs from its source run, loaded once through the storage ports."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from models import (
    ApprovalRecord,
    ExecutionEventType,
    PolicyDecisionRecord,
    PromptArtifact,
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
    """How much of each recorded stream had been used when a step finished (for forks).

    Positions only (O(1) per step): the counts per request hash of the fixtures and retrievals
    used up to the step are computed on demand, for the one fork step that needs them, from
    the run's ordered streams (``fixtures`` and ``retrievals``)."""

    model_calls: int = 0
    clock_reads: int = 0
    next_step: str | None = None
    random_state_ref: str | None = None
    #: the sequence of the step's STEP_COMPLETED event
    sequence: int = 0
    #: how many TOOL_CALL and RETRIEVAL events came before the step's end, and the run's
    #: request (query) hashes in recorded order, shared by every step's marks
    fixture_calls: int = 0
    retrieval_calls: int = 0
    fixture_order: list[str] = field(default_factory=list, repr=False, compare=False)
    retrieval_order: list[str] = field(default_factory=list, repr=False, compare=False)

    @property
    def fixtures(self) -> dict[str, int]:
        """Per request hash, the tool fixtures used up to the end of the step."""
        return dict(Counter(self.fixture_order[: self.fixture_calls]))

    @property
    def retrievals(self) -> dict[str, int]:
        """Per query hash, the retrieval fixtures used up to the end of the step."""
        return dict(Counter(self.retrieval_order[: self.retrieval_calls]))


@dataclass
class SourceEvidence:
    run: RunRecord
    agent_input: Any
    seed: int
    start_time: datetime
    model_responses: list[ModelResponse]
    #: the compiled prompt each recorded model call was sent (aligned with ``model_responses``;
    #: None where the recording names none, e.g. an imported call): what EXACT sends again
    model_prompts: list[PromptArtifact | None]
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
    #: the bytes of evidence payloads loaded: what the engine's cache is bounded by
    loaded_bytes: int = 0


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
    fixture_order: list[str] = []
    retrieval_order: list[str] = []
    loaded_bytes = 0
    for event, data in loaded:
        loaded_bytes += len(data or b"")
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
            fixture_order.append(fixture.request_hash)
        elif event.type is E.RETRIEVAL:
            retrieval = RetrievalFixture.model_validate(payload)
            retrievals.setdefault(retrieval.query_hash, []).append(retrieval)
            retrieval_order.append(retrieval.query_hash)
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
                next_step=payload.get("next"),
                random_state_ref=payload.get("random_state_ref"),
                sequence=event.sequence,
                fixture_calls=len(fixture_order),
                retrieval_calls=len(retrieval_order),
                fixture_order=fixture_order,
                retrieval_order=retrieval_order,
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
        model_prompts=_model_prompts(loaded),
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
        loaded_bytes=loaded_bytes,
    )


_INTERESTING = {
    E.RUN_STARTED,
    E.MODEL_CALL,
    E.PROMPT_COMPILED,
    E.CLOCK_READ,
    E.TOOL_CALL,
    E.RETRIEVAL,
    E.SIDE_EFFECT,
    E.STEP_STARTED,
    E.STEP_COMPLETED,
    E.RUN_COMPLETED,
    E.RUN_FAILED,
}


def _model_prompts(loaded: list[tuple[Any, bytes | None]]) -> list[PromptArtifact | None]:
    """Per recorded model call, in order, the compiled prompt it names (its
    ``prompt_artifact_id``), or None when it names none the run recorded."""
    compiled: dict[str, PromptArtifact] = {}
    prompts: list[PromptArtifact | None] = []
    for event, data in loaded:
        if event.type is E.PROMPT_COMPILED:
            prompt = PromptArtifact.model_validate_json(data or b"{}")
            compiled[prompt.artifact_id] = prompt
        elif event.type is E.MODEL_CALL:
            named = json.loads(data or b"{}").get("prompt_artifact_id")
            prompts.append(compiled.get(str(named)))
    return prompts


_INSTANT = TypeAdapter(Instant)


def _parse_instant(text: str) -> datetime:
    return _INSTANT.validate_python(text)

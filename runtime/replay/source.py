"""Everything a replay needs from its source run, loaded once through the storage ports."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar

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
from runtime.turns import in_turns

E = ExecutionEventType
T = TypeVar("T")
#: source events read between two turns of the event loop (``load_source_evidence``)
YIELD_EVERY_EVENTS = 1024


@dataclass
class StepMarks:
    """How much of each recorded stream had been used when a step first started: where a fork
    that regenerates the step resumes (everything before it is history).

    Positions only (O(1) per step): the counts per request hash of the fixtures and retrievals
    used up to the step are computed on demand, for the one fork step that needs them, from
    the run's ordered streams (``fixtures`` and ``retrievals``)."""

    model_calls: int = 0
    clock_reads: int = 0
    #: the step the fork runs first (the marked step itself)
    next_step: str | None = None
    #: the random state the step started from (the previous step's; None for the first)
    random_state_ref: str | None = None
    #: the sequence of the last event before the step's first STEP_STARTED: the history a
    #: fork keeps (a fork is compared on what came after it)
    sequence: int = 0
    #: how many TOOL_CALL and RETRIEVAL events came before the step started, and the run's
    #: request (query) hashes in recorded order, shared by every step's marks
    fixture_calls: int = 0
    retrieval_calls: int = 0
    fixture_order: list[str] = field(default_factory=list, repr=False, compare=False)
    retrieval_order: list[str] = field(default_factory=list, repr=False, compare=False)

    @property
    def fixtures(self) -> dict[str, int]:
        """Per request hash, the tool fixtures used before the step started."""
        return dict(Counter(self.fixture_order[: self.fixture_calls]))

    @property
    def retrievals(self) -> dict[str, int]:
        """Per query hash, the retrieval fixtures used before the step started."""
        return dict(Counter(self.retrieval_order[: self.retrieval_calls]))


@dataclass(frozen=True)
class ForkPoint:
    """Where a fork that regenerates a step resumes in its source: the fixtures and retrievals
    the source had used before the step started (per request / query hash) and the schema
    version of the checkpoint it resumes from (the previous step's; None: no checkpoint, e.g.
    the run's first step, which starts from the empty state)."""

    fixtures: dict[str, int]
    retrievals: dict[str, int]
    state_schema_version: int | None


class ReplaySource(Protocol):
    """What a replay step reads of its source run, one item at a time: ``SourceEvidence``
    answers from memory; a sandboxed step's source asks the worker for what its batch needs
    (``activities.sandbox.source_windows``) instead of decoding the whole run again."""

    @property
    def run(self) -> RunRecord: ...
    @property
    def agent_input(self) -> Any: ...
    @property
    def seed(self) -> int: ...
    @property
    def start_time(self) -> datetime: ...

    def model_call_count(self) -> int: ...
    def model_response(self, index: int) -> ModelResponse | None: ...
    def model_prompt(self, index: int) -> PromptArtifact | None: ...
    def clock_at(self, index: int) -> datetime: ...
    def fixture(self, request_hash: str, used: int) -> ToolFixture | None: ...
    def retrieval(self, query_hash: str, used: int) -> RetrievalFixture | None: ...
    def approval(self, action_hash: str) -> ApprovalRecord | None: ...
    def side_effect(self, action_hash: str) -> SideEffectRecord | None: ...
    def provider_fixture(self, provider_request_id: str | None) -> ToolFixture | None: ...
    def fork_point(self, step_id: str) -> ForkPoint | None: ...


_OrderIndex = tuple[dict[str, list[int]], list[int]]


def _order_index(order: list[str]) -> _OrderIndex:
    positions: dict[str, list[int]] = {}
    repeats: list[int] = []
    for position, key in enumerate(order):
        seen = positions.setdefault(key, [])
        repeats.append(len(seen))
        seen.append(position)
    return positions, repeats


def _read_ahead(
    order: list[str],
    recorded: dict[str, list[T]],
    index: _OrderIndex,
    key: str,
    used: int,
    limit: int,
) -> list[tuple[str, int, T]]:
    positions, repeats = index
    seen = positions.get(key, ())
    if not 0 <= used < len(seen):
        return []
    start = seen[used]
    return [
        (order[p], repeats[p], recorded[order[p]][repeats[p]])
        for p in range(start, min(start + max(limit, 1), len(order)))
    ]


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
    #: per step, its last checkpoint (what the migration check reads)
    checkpoints: dict[str, ReplayCheckpoint]
    #: per step (its first run), the stream positions before it started
    starts: dict[str, StepMarks]
    steps: list[str]
    event_count: int
    #: the bytes of evidence payloads loaded: what the engine's cache is bounded by
    loaded_bytes: int = 0
    #: every checkpoint, by sequence (a fork resumes from the last one before its step)
    checkpoints_in_order: list[ReplayCheckpoint] = field(default_factory=list, repr=False)
    #: the run's tool request hashes and retrieval query hashes in recorded order
    fixture_order: list[str] = field(default_factory=list, repr=False)
    retrieval_order: list[str] = field(default_factory=list, repr=False)
    #: per hash its positions in the order, and per position its repeat index (built on the
    #: first read-ahead: only a worker serving sandboxed steps needs them)
    _tool_index: _OrderIndex | None = field(default=None, init=False, repr=False, compare=False)
    _retrieval_index: _OrderIndex | None = field(
        default=None, init=False, repr=False, compare=False
    )

    # what a replay step reads (``ReplaySource``) ----------------------------------------------

    def model_call_count(self) -> int:
        return len(self.model_responses)

    def model_response(self, index: int) -> ModelResponse | None:
        return self.model_responses[index] if 0 <= index < len(self.model_responses) else None

    def model_prompt(self, index: int) -> PromptArtifact | None:
        return self.model_prompts[index] if 0 <= index < len(self.model_prompts) else None

    def clock_at(self, index: int) -> datetime:
        """The ``index``-th clock reading; past the last one the last (rule 6: time never
        runs on in a replay), the run's start when it read none."""
        reads = self.clock_reads
        if not reads:
            return self.start_time
        return reads[index] if 0 <= index < len(reads) else reads[-1]

    def fixture(self, request_hash: str, used: int) -> ToolFixture | None:
        """The recorded answer to the ``used``-th repeat of a request (from 0), if recorded."""
        recorded = self.fixtures.get(request_hash, ())
        return recorded[used] if 0 <= used < len(recorded) else None

    def retrieval(self, query_hash: str, used: int) -> RetrievalFixture | None:
        recorded = self.retrievals.get(query_hash, ())
        return recorded[used] if 0 <= used < len(recorded) else None

    def approval(self, action_hash: str) -> ApprovalRecord | None:
        return self.approvals.get(action_hash)

    def side_effect(self, action_hash: str) -> SideEffectRecord | None:
        return self.side_effects.get(action_hash)

    def provider_fixture(self, provider_request_id: str | None) -> ToolFixture | None:
        """The first recorded tool call the provider answered under ``provider_request_id``
        (in the order of the request hashes' first use)."""
        return next(
            (
                f
                for fs in self.fixtures.values()
                for f in fs
                if f.provider_request_id == provider_request_id
            ),
            None,
        )

    def tool_fixtures_from(
        self, request_hash: str, used: int, limit: int
    ) -> list[tuple[str, int, ToolFixture]]:
        """The ``used``-th recorded answer to ``request_hash`` and the answers recorded after
        it, ``limit`` at most, each with its request hash and repeat index: what a replay
        that follows its source asks next (empty when that answer was never recorded)."""
        if self._tool_index is None:
            self._tool_index = _order_index(self.fixture_order)
        return _read_ahead(
            self.fixture_order, self.fixtures, self._tool_index, request_hash, used, limit
        )

    def retrievals_from(
        self, query_hash: str, used: int, limit: int
    ) -> list[tuple[str, int, RetrievalFixture]]:
        """``tool_fixtures_from`` for retrievals."""
        if self._retrieval_index is None:
            self._retrieval_index = _order_index(self.retrieval_order)
        return _read_ahead(
            self.retrieval_order, self.retrievals, self._retrieval_index, query_hash, used, limit
        )

    def checkpoint_before(self, step_id: str) -> ReplayCheckpoint | None:
        """The checkpoint a fork regenerating ``step_id`` resumes from: the last one recorded
        before the step first started (None before the run's first step)."""
        marks = self.starts.get(step_id)
        if marks is None:
            return None
        before = [c for c in self.checkpoints_in_order if c.sequence <= marks.sequence]
        return before[-1] if before else None

    def fork_point(self, step_id: str) -> ForkPoint | None:
        marks = self.starts.get(step_id)
        if marks is None:
            return None
        checkpoint = self.checkpoint_before(step_id)
        version = checkpoint.state_schema_version if checkpoint is not None else None
        return ForkPoint(marks.fixtures, marks.retrievals, version)


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
    starts: dict[str, StepMarks] = {}
    steps: list[str] = []
    random_state_ref: str | None = None
    agent_input: Any = None
    seed = 0
    start = loaded[0][0].logical_time if loaded else run.created_at
    ended = False
    fixture_order: list[str] = []
    retrieval_order: list[str] = []
    loaded_bytes = 0
    async for event, data in in_turns(loaded, YIELD_EVERY_EVENTS):
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
            if event.step_id not in starts:
                streams = (len(responses), len(reads), fixture_order, retrieval_order)
                starts[event.step_id] = _marks_before(event, random_state_ref, *streams)
        elif event.type is E.STEP_COMPLETED:
            random_state_ref = payload.get("random_state_ref")
    approvals, decisions, in_order = await _looked_up(evidence, run_id)
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
        checkpoints={c.step_id: c for c in in_order},
        checkpoints_in_order=in_order,
        starts=starts,
        steps=steps,
        # the run's last event (RUN_COMPLETED/RUN_FAILED) is among those loaded
        event_count=loaded[-1][0].sequence if loaded else 0,
        loaded_bytes=loaded_bytes,
        fixture_order=fixture_order,
        retrieval_order=retrieval_order,
    )


def _marks_before(
    started: Any,
    random_state_ref: str | None,
    model_calls: int,
    clock_reads: int,
    fixture_order: list[str],
    retrieval_order: list[str],
) -> StepMarks:
    """The positions in every stream when the step of ``started`` (its STEP_STARTED) began."""
    return StepMarks(
        model_calls=model_calls,
        clock_reads=clock_reads,
        next_step=started.step_id,
        random_state_ref=random_state_ref,
        sequence=started.sequence - 1,
        fixture_calls=len(fixture_order),
        retrieval_calls=len(retrieval_order),
        fixture_order=fixture_order,
        retrieval_order=retrieval_order,
    )


async def _looked_up(
    evidence: EvidenceReader, run_id: str
) -> tuple[dict[str, ApprovalRecord], dict[str, PolicyDecisionRecord], list[ReplayCheckpoint]]:
    """The run's approvals by action, policy decisions by input and checkpoints in recorded
    order."""
    approvals = {a.action_hash: a for a in await evidence.records(ApprovalRecord, run_id)}
    decisions = {d.input_hash: d for d in await evidence.records(PolicyDecisionRecord, run_id)}
    checkpoints = await evidence.records(ReplayCheckpoint, run_id)
    return approvals, decisions, sorted(checkpoints, key=lambda c: c.sequence)


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

"""Ingestion: record a run of an agent that is not written on our runtime, through the same
ledger and evidence tables as the recorder runtime, so the chain, completeness and replay work
for it (see ``models.ingest`` and ``docs/ingest-format.md``).

Idempotent by construction: every ledger event is named after the client event it came from
(``ingest.recorder``). A re-sent event whose content matches is accepted and writes
nothing; a different event under a recorded sequence raises ``SequenceConflictError``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import structlog

from ingest.events import record_event
from ingest.recorder import IngestRecorder, content_digest
from ingest.state import IngestState, load_ingest_state
from models import ExecutionEventType, RunRecord, RunStatus
from models.canonical import canonicalize
from models.capability import side_effect_class_from_hints
from models.errors import ConflictError, RunNotFoundError, SequenceConflictError
from models.ingest import IngestEvent, IngestResult, IngestRunHeader, RunEndEvent
from runtime.ports import ArtifactStore, EventLedger, EvidenceReader
from runtime.tool_loop.conversation import START, LoopInput, loop_outcome, record_prompt

log = structlog.get_logger(__name__)
E = ExecutionEventType


async def ingest_run(
    ledger: EventLedger, artifacts: ArtifactStore, header: IngestRunHeader
) -> IngestResult:
    """Create the run (header, RUN_STARTED with the loop's input, the prompt artifact, the
    ``start`` step). The same header again is a no-op; another one under the run id is a
    ``ConflictError``."""
    loop = await _loop_input(artifacts, header)
    await _create_run(ledger, _run_record(header, loop.system_prompt_ref))
    digest = content_digest(header.model_dump(mode="json"))
    existing = await ledger.events(header.run_id)
    if existing:
        if not existing[0].event_id.endswith(f":0:1:{digest}"):
            raise ConflictError(
                f"run {header.run_id!r} was already ingested with another header "
                "(system prompt, tools, initial messages or attachments differ)"
            )
        return IngestResult(
            run_id=header.run_id, duplicates=1, next_sequence=1, head_sequence=existing[-1].sequence
        )
    recorder = IngestRecorder(ledger, artifacts, header.run_id, header.started_at, head=0)
    recorder.begin(0, digest, header.started_at)
    recorder.step_id = "run"
    await recorder.record(
        E.RUN_STARTED,
        payload={
            "graph": f"{header.graph_id}@{header.graph_version}",
            "input": loop.to_json(),
            "seed": 0,
            "state_schema_version": 1,
            "ingested": True,
        },
    )
    recorder.step_id = START
    await recorder.record(E.STEP_STARTED, payload={"step": START})
    await record_prompt(recorder, header.system_prompt)
    try:
        await recorder.flush(expected_sequence=1)
    except SequenceConflictError:  # a concurrent identical create won the race
        return await ingest_run(ledger, artifacts, header)
    log.debug("run ingested", run_id=header.run_id, graph=header.graph_id)
    return IngestResult(
        run_id=header.run_id, recorded=1, next_sequence=1, head_sequence=recorder.last_sequence
    )


async def _loop_input(artifacts: ArtifactStore, header: IngestRunHeader) -> LoopInput:
    """The tool loop's input, its system prompt, tool declarations and attachments stored as
    artifacts."""
    system_ref = (
        await artifacts.put(header.system_prompt.encode()) if header.system_prompt else None
    )
    tools = [
        {
            "name": t.name,
            "description": t.description,
            "parameters": t.parameters,
            "side_effect_class": (
                t.side_effect_class
                or side_effect_class_from_hints(t.read_only_hint, t.destructive_hint)
            ).value,
        }
        for t in header.tools
    ]
    tools_ref = await artifacts.put(canonicalize(tools)) if tools else None
    attachments = {
        name: await artifacts.put(canonicalize(value))
        for name, value in sorted(header.attachments.items())
    }
    return LoopInput(
        system_prompt_ref=system_ref,
        tools_ref=tools_ref,
        initial_messages=header.initial_messages,
        user_turns=header.user_turns,
        max_model_calls=header.max_model_calls,
        terminate_tools=header.terminate_tools,
        answers_before_end=header.answers_before_end,
        attachments=attachments,
    )


def _run_record(header: IngestRunHeader, system_ref: str | None) -> RunRecord:
    """The run's record; the pinned prompt bundle and environment default to the system
    prompt's artifact and the environment's hash."""
    pinned = header.pinned
    if pinned.prompt_bundle_hash is None and system_ref is not None:
        pinned = pinned.model_copy(update={"prompt_bundle_hash": system_ref})
    if pinned.environment_hash is None and header.environment is not None:
        pinned = pinned.model_copy(update={"environment_hash": header.environment.record_hash()})
    return RunRecord(
        run_id=header.run_id,
        graph_id=header.graph_id,
        graph_version=header.graph_version,
        created_at=header.started_at,
        pinned=pinned,
        environment=header.environment,
        source_code=header.source_code,
        labels=header.labels,
    )


async def _create_run(ledger: EventLedger, record: RunRecord) -> None:
    """Create the run; the same header again is accepted, another one is a ``ConflictError``."""
    try:
        existing_run = await ledger.get_run(record.run_id)
    except RunNotFoundError:
        await ledger.create_run(record)
    else:  # the same header again: a finished run's header has its status and outcome too
        same = record.model_copy(
            update={"status": existing_run.status, "outcome": existing_run.outcome}
        )
        if same != existing_run:
            raise ConflictError(f"run {record.run_id!r} already exists with another header")


async def ingest_events(
    ledger: EventLedger,
    artifacts: ArtifactStore,
    evidence: EvidenceReader,
    run_id: str,
    events: Sequence[IngestEvent],
) -> IngestResult:
    """Record a batch of client events atomically (all new ones or none). Events already
    recorded with the same content are skipped; see the module docstring for conflicts."""
    for attempt in range(3):
        state = await load_ingest_state(ledger, artifacts, run_id)
        try:
            return await _record_batch(ledger, artifacts, evidence, state, events)
        except SequenceConflictError:
            # another writer appended meanwhile: reload, so its events count as recorded
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def _record_batch(
    ledger: EventLedger,
    artifacts: ArtifactStore,
    evidence: EvidenceReader,
    state: IngestState,
    events: Sequence[IngestEvent],
) -> IngestResult:
    run_id = state.run.run_id
    recorder = IngestRecorder(ledger, artifacts, run_id, state.run.created_at, head=state.head)
    recorder.step_id = state.step or "run"
    expected = state.next_sequence
    duplicates = recorded = 0
    end: RunEndEvent | None = None
    for event in sorted(events, key=lambda e: e.sequence):
        digest = content_digest(event.model_dump(mode="json"))
        known = state.recorded.get(event.sequence)
        if known is not None:
            if known != digest:
                raise SequenceConflictError(
                    f"run {run_id!r}: event {event.sequence} is already recorded with other content"
                )
            duplicates += 1
            continue
        if event.sequence != expected:
            raise SequenceConflictError(
                f"run {run_id!r}: event {event.sequence} is out of order; "
                f"the next event is {expected}"
            )
        if state.ended:
            raise ConflictError(f"run {run_id!r} has ended; event {event.sequence} is refused")
        recorder.begin(event.sequence, digest, event.at)
        await record_event(recorder, evidence, state, event)
        state.recorded[event.sequence] = digest
        recorded += 1
        expected += 1
        if isinstance(event, RunEndEvent):
            end = event
            await _end(recorder, state, event)
    if recorder.pending:
        await recorder.flush(expected_sequence=state.head + 1)
    if end is not None or (state.ended and state.run.status is RunStatus.RUNNING):
        await _finish(ledger, run_id)
    return IngestResult(
        run_id=run_id,
        recorded=recorded,
        duplicates=duplicates,
        next_sequence=expected,
        head_sequence=recorder.last_sequence,
        ended=state.ended,
    )


async def _end(recorder: IngestRecorder, state: IngestState, event: RunEndEvent) -> None:
    outcome = loop_outcome(state.ended_by()) if state.is_tool_loop else event.outcome
    await recorder.record(E.STEP_COMPLETED, payload={"next": None, "output": outcome})
    recorder.step_id = "run"
    if event.status is RunStatus.FAILED:
        await recorder.record(
            E.RUN_FAILED,
            payload={
                "error": event.error or "SourceRunFailed",
                "message": event.error or "the source reported the run failed",
                "steps": state.steps,
                "source_outcome": event.outcome,
            },
        )
    else:
        await recorder.record(
            E.RUN_COMPLETED,
            payload={"outcome": outcome, "steps": state.steps, "source_outcome": event.outcome},
        )
    state.ended = True


async def _finish(ledger: EventLedger, run_id: str) -> None:
    """Mirror the recorded end into the run header (again, if an earlier call died before)."""
    final = (
        await ledger.events_with_payloads(run_id, types=frozenset({E.RUN_COMPLETED, E.RUN_FAILED}))
    )[-1]
    event, data = final
    payload = json.loads(data or b"{}")
    if event.type is E.RUN_COMPLETED:
        await ledger.finish_run(run_id, RunStatus.COMPLETED, payload.get("outcome"))
    else:
        await ledger.finish_run(
            run_id,
            RunStatus.FAILED,
            {"error": payload.get("error"), "message": payload.get("message")},
        )

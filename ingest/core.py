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
from ingest.redaction import (
    ingest_policy,
    ingest_policy_version,
    register_subjects,
    sanitized_header,
    seal_raw_forms,
)
from ingest.state import IngestState, is_read, load_ingest_state, state_from_events, states_of
from ingest.writes import close_open_writes
from models import ExecutionEventType, RunRecord, RunStatus
from models.canonical import canonicalize
from models.capability import side_effect_class_from_hints
from models.errors import ConflictError, SequenceConflictError
from models.ingest import IngestEvent, IngestResult, IngestRunHeader, RunEndEvent
from models.redaction import pseudonym_subjects
from runtime.concurrent_puts import ConcurrentPuts
from runtime.ports import ArtifactStore, EventLedger, EvidenceReader, IngestLedger, NewEvent
from runtime.privacy.redaction import start_run
from runtime.tool_loop.conversation import START, LoopInput, loop_outcome, record_prompt

log = structlog.get_logger(__name__)
E = ExecutionEventType
#: reloads of a batch whose snapshot another writer made stale
_ATTEMPTS = 16


async def ingest_run(
    ledger: IngestLedger, artifacts: ArtifactStore, header: IngestRunHeader
) -> IngestResult:
    """Create the run (header, RUN_STARTED with the loop's input, the prompt artifact, the
    ``start`` step) in one transaction: the header is validated and every payload prepared
    before anything is written, so a refused header leaves no run. The same header again
    writes no event (it registers the people it names who are not on record yet: a process
    that died after the start left them out); another one under the run id is a
    ``ConflictError``."""
    puts = ConcurrentPuts(artifacts)  # settled before the run's first events are written
    policy_version = ingest_policy_version(ledger, header.pinned.redaction_policy_version)
    policy = ingest_policy(ledger, policy_version)
    digest = content_digest(header.model_dump(mode="json"))  # of what the client sent
    # the system prompt and attachments stored sanitized, their raw forms sealed (below)
    header, raw_forms = sanitized_header(header, policy)
    put = _KeptPuts(puts)
    loop = await _loop_input(put, header)
    recorder = IngestRecorder(ledger, puts, header.run_id, header.started_at, head=0)
    recorder.redaction = policy
    if raw_forms:  # the people the sanitized system prompt and attachments name, by pseudonym
        recorder.subjects |= pseudonym_subjects(
            canonicalize({"system_prompt": header.system_prompt, "attachments": header.attachments})
        )
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
    events = recorder.take_pending()
    run = _run_record(header, loop.system_prompt_ref)
    if run.pinned.redaction_policy_version != policy_version:
        run = run.model_copy(
            update={
                "pinned": run.pinned.model_copy(update={"redaction_policy_version": policy_version})
            }
        )
    await puts.settle()
    await seal_raw_forms(ledger, header.run_id, raw_forms, policy)
    if await start_run(ledger, run, events, policy):
        await register_subjects(ledger, header.run_id, recorder.subjects)
        log.debug("run ingested", run_id=header.run_id, graph=header.graph_id)
        # the state of the run just written, for its first batch (not read back)
        written = [
            (
                i,
                e.type,
                e.step_id,
                e.event_id,
                e.canonical_payload() if is_read(e.type) else None,  # the bytes made once
            )
            for i, e in enumerate(events, start=1)
        ]
        states_of(ledger).keep(await state_from_events(run, written, put))
        return IngestResult(
            run_id=header.run_id, recorded=1, next_sequence=1, head_sequence=len(events)
        )
    return await _header_again(ledger, header.run_id, events, digest, recorder.subjects)


async def _header_again(
    ledger: IngestLedger,
    run_id: str,
    events: Sequence[NewEvent],
    digest: str,
    subjects: set[str],
) -> IngestResult:
    """``ingest_run`` of a run that exists: the same header again (a no-op for its events),
    one left without events by an older version (started now), or another header
    (``ConflictError``). A client sends a header again when it got no answer, which is also
    what it does when this process died between the run's start and its people's
    registration: those still missing are registered now (the known ones cost a read), or a
    deletion of one of them would never find this run."""
    existing = await ledger.events(run_id)
    if not existing:  # a header left without events by an older version: start it now
        await ledger.append_many(run_id, events, expected_sequence=1)
        await register_subjects(ledger, run_id, subjects)
        return IngestResult(run_id=run_id, recorded=1, next_sequence=1, head_sequence=len(events))
    if not existing[0].event_id.endswith(f":0:1:{digest}"):
        raise ConflictError(
            f"run {run_id!r} was already ingested with another header "
            "(system prompt, tools, initial messages or attachments differ)"
        )
    await register_subjects(ledger, run_id, subjects)
    return IngestResult(
        run_id=run_id, duplicates=1, next_sequence=1, head_sequence=existing[-1].sequence
    )


class _KeptPuts:
    """``ConcurrentPuts`` that keeps what it put: the new run's state is built from its tools
    and system prompt, read from here instead of from the files just written (a read and a
    hash each)."""

    def __init__(self, puts: ConcurrentPuts) -> None:
        self.puts = puts
        self.kept: dict[str, bytes] = {}

    async def put(self, data: bytes) -> str:
        digest = await self.puts.put(data)
        self.kept[digest] = bytes(data)
        return digest

    async def get(self, digest: str) -> bytes:
        kept = self.kept.get(digest)
        return kept if kept is not None else await self.puts.get(digest)


async def _loop_input(artifacts: _KeptPuts, header: IngestRunHeader) -> LoopInput:
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


async def ingest_events(
    ledger: IngestLedger,
    artifacts: ArtifactStore,
    evidence: EvidenceReader,
    run_id: str,
    events: Sequence[IngestEvent],
) -> IngestResult:
    """Record a batch of client events atomically (all new ones or none). Events already
    recorded with the same content are skipped; see the module docstring for conflicts."""
    states = states_of(ledger)
    for attempt in range(_ATTEMPTS):
        # the state this process left at the head it appended last; read again only when
        # that head turns out stale (the conditional append below conflicts)
        state = states.take(run_id) if attempt == 0 else None
        cached = state is not None
        if state is None:
            state = await load_ingest_state(ledger, artifacts, run_id)
        try:
            result = await _record_batch(ledger, artifacts, evidence, state, events)
        except ConflictError:
            if cached:  # refused by a state that may be stale: judged again on a fresh one
                continue
            raise
        except _StaleSnapshot:
            # the head moved since the snapshot (another writer appended): reload, so its
            # events count as recorded and ours are checked against them
            continue
        # (any other failure drops the state: it may hold half of the refused batch)
        states.keep(state)
        return result
    sequences = sorted(e.sequence for e in events)
    raise SequenceConflictError(
        f"run {run_id!r}: events {sequences[0]}..{sequences[-1]} could not be appended: "
        f"other writers appended {_ATTEMPTS} times meanwhile; send them again"
    )


async def _record_batch(
    ledger: IngestLedger,
    artifacts: ArtifactStore,
    evidence: EvidenceReader,
    state: IngestState,
    events: Sequence[IngestEvent],
) -> IngestResult:
    run_id = state.run.run_id
    puts = ConcurrentPuts(artifacts)  # settled before the batch's events are written
    recorder = IngestRecorder(ledger, puts, run_id, state.run.created_at, head=state.head)
    recorder.redaction = ingest_policy(ledger, state.run.pinned.redaction_policy_version)
    recorder.stored_messages = state.stored_messages
    recorder.step_id = state.step or "run"
    expected = state.next_sequence
    duplicates = recorded = 0
    end: RunEndEvent | None = None
    for event in sorted(events, key=lambda e: e.sequence):
        digest = content_digest(event.digest_body())
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
        state.note(event.sequence, digest)
        recorded += 1
        expected += 1
        if isinstance(event, RunEndEvent):
            end = event
            await _end(recorder, state, event)
    await puts.settle()
    # the people the batch names (those this process made subjects of the run already
    # aside) become its subjects with the batch's events, never after their raw content
    learned = recorder.subjects - state.subjects
    if recorder.pending:
        try:  # the ledger appends only if its head is still the snapshot's
            await recorder.append(state.head + 1, learned)
        except SequenceConflictError as exc:
            raise _StaleSnapshot from exc
    state.subjects |= learned
    state.head = recorder.last_sequence
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


class _StaleSnapshot(Exception):
    """Internal: the run's head moved after its state was loaded."""


async def _end(recorder: IngestRecorder, state: IngestState, event: RunEndEvent) -> None:
    outcome = loop_outcome(state.ended_by()) if state.is_tool_loop else event.outcome
    await close_open_writes(recorder, state)
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

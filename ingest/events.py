"""One client event → the ledger events our own runtime would have recorded for it.

Steps follow the tool loop (``runtime.tool_loop``): each model call and each user turn is a
step, consecutive tool calls are one ``tools`` step, and every other kind of event joins the
open step, unless the client names the step itself.
"""

from __future__ import annotations

from typing import Any

from pydantic import JsonValue

from ingest.recorder import IngestRecorder
from ingest.state import IngestState
from models import (
    ApprovalRecord,
    ExecutionEventType,
    PolicyDecisionRecord,
    RetrievalFixture,
    SideEffectClass,
    SideEffectRecord,
    SideEffectStatus,
    ToolFixture,
    ToolOutcome,
)
from models.canonical import canonical_hash
from models.errors import InvalidInputError, NotFoundError
from models.ingest import (
    USER_REPLY,
    ApprovalEvent,
    CheckpointEvent,
    IngestEvent,
    ModelCallEvent,
    OpaqueEvent,
    PolicyDecisionEvent,
    RetrievalEvent,
    RunEndEvent,
    SideEffectStateEvent,
    ToolCallEvent,
    ToolIntentEvent,
    ToolResultEvent,
    UserMessageEvent,
)
from models.model_call import ModelResponse
from runtime.approvals import action_hash
from runtime.ports import EvidenceReader
from runtime.tool_loop.context import record_context
from runtime.tool_loop.conversation import (
    MODEL,
    TOOLS,
    USER,
    record_model_response,
    run_key,
    tool_schemas,
    user_reply_request,
    user_reply_response,
)
from runtime.tools import request_hash

E = ExecutionEventType
_OWN_STEP = {"model_call": MODEL, "user_message": USER}
_STEP_KIND = {**_OWN_STEP, "tool_call": TOOLS, "tool_intent": TOOLS, "tool_result": TOOLS}
_STATUS_OUTCOME = {
    ToolOutcome.SUCCESS: SideEffectStatus.CONFIRMED,
    ToolOutcome.ERROR: SideEffectStatus.FAILED,
    ToolOutcome.DENIED: SideEffectStatus.FAILED,
    ToolOutcome.TIMEOUT: SideEffectStatus.UNKNOWN,
    ToolOutcome.UNKNOWN: SideEffectStatus.UNKNOWN,
}


def side_effect_id(run_id: str, tool_call_sequence: int) -> str:
    return f"se-{run_key(run_id, 'side-effect', tool_call_sequence)}"


async def _enter_step(recorder: IngestRecorder, state: IngestState, event: IngestEvent) -> None:
    """Close the open step and start the event's own, when it has one."""
    if isinstance(event, RunEndEvent):
        return
    step = event.step_id or _STEP_KIND.get(event.type)
    if step is None:
        return  # joins the open step
    new = step != state.step or (event.step_id is None and event.type in _OWN_STEP)
    if not new:
        return
    if state.step is not None:
        await recorder.record(E.STEP_COMPLETED, payload={"next": step, "output": None})
    recorder.step_id = step
    state.begin_step(step)
    await recorder.record(E.STEP_STARTED, payload={"step": step})


async def record_event(
    recorder: IngestRecorder, evidence: EvidenceReader, state: IngestState, event: IngestEvent
) -> None:
    await _enter_step(recorder, state, event)
    if isinstance(event, ModelCallEvent):
        await _model_call(recorder, state, event)
    elif isinstance(event, ToolCallEvent):
        await _tool_call(recorder, state, event)
    elif isinstance(event, UserMessageEvent):
        state.apply_user(event.content, event.done)
        turn = state.conversation.user_turns
        await _fixture(
            recorder,
            f"user-{turn}",
            USER_REPLY,
            user_reply_request(turn),
            user_reply_response(event.content, event.done),
            ToolOutcome.SUCCESS,
            SideEffectClass.READ,
        )
    elif isinstance(event, RetrievalEvent):
        await recorder.record(
            E.RETRIEVAL,
            record=RetrievalFixture(
                query_hash=canonical_hash(event.query),
                retriever_version=event.retriever_version,
                evidence=event.evidence,
                run_id=recorder.run_id,
                step_id=recorder.step_id,
            ),
        )
    elif isinstance(event, PolicyDecisionEvent):
        await recorder.record(
            E.POLICY_DECISION,
            record=PolicyDecisionRecord(
                policy_id=event.policy_id,
                policy_version=event.policy_version,
                input_hash=canonical_hash(event.input),
                sanitized_input=event.input,
                decision=event.decision,
                reasons=event.reasons,
                run_id=recorder.run_id,
                step_id=recorder.step_id,
            ),
        )
    elif isinstance(event, ApprovalEvent):
        await recorder.record(
            E.APPROVAL,
            record=ApprovalRecord(
                approval_id=event.approval_id,
                approver=event.approver,
                action_hash=action_hash(event.capability, event.arguments),
                decision=event.decision,
                approved_at=recorder.logical_time(),
                expires_at=event.expires_at,
                run_id=recorder.run_id,
                step_id=recorder.step_id,
            ),
        )
    elif isinstance(event, ToolIntentEvent):
        await _tool_intent(recorder, state, event)
    elif isinstance(event, ToolResultEvent):
        await _tool_result(recorder, state, event)
    elif isinstance(event, SideEffectStateEvent):
        await _side_effect_change(recorder, evidence, state, event)
    elif isinstance(event, CheckpointEvent):
        await recorder.checkpoint(
            recorder.step_id, dict(event.state), event.state_schema_version, None
        )
    elif isinstance(event, OpaqueEvent):
        await recorder.record(
            E.OPAQUE, payload={"source": event.source, "reason": event.reason, "data": event.data}
        )


async def _model_call(recorder: IngestRecorder, state: IngestState, event: ModelCallEvent) -> None:
    messages = list(event.messages) if event.messages is not None else state.conversation.messages
    tools = tool_schemas(state.tools_json)
    _, snapshot = await record_context(
        recorder,
        state.conversation.model_calls + 1,
        state.system_prompt,
        messages,
        tools,
        event.model,
        recorder.stored_messages,
        state.context,
    )
    response = ModelResponse(
        model=event.model,
        content=event.content,
        tool_calls=event.tool_calls,
        finish_reason=event.finish_reason,
        usage=event.usage,
        cost=event.cost,
        response_id=event.response_id,
    )
    profile = state.run.pinned.model_profile or f"imported:{event.model}"
    extra: dict[str, JsonValue] = {}
    if event.parameters:
        extra["request_parameters"] = event.parameters
    if event.latency_ms is not None:
        extra["latency_ms"] = event.latency_ms
    await record_model_response(
        recorder,
        profile,
        state.conversation.prompt_artifact_id,
        snapshot,
        response,
        extra or None,
        seed=event.seed,
    )
    state.apply_model(response)


async def _tool_call(recorder: IngestRecorder, state: IngestState, event: ToolCallEvent) -> None:
    _refuse_reserved(event.sequence, event.name)
    declared = state.tool_classes.get(event.name)
    effect_class = event.side_effect_class or SideEffectClass(declared or "WRITE")
    call_id = event.tool_call_id or f"call-{event.sequence}"
    preq: str | None = None
    if effect_class is SideEffectClass.WRITE:
        executing = await _open_write(
            recorder,
            state,
            event.sequence,
            event.name,
            event.arguments,
            None,
            event.provider_request_id,
        )
        preq = executing.provider_request_id
        status = event.side_effect_status or _STATUS_OUTCOME.get(
            event.outcome, SideEffectStatus.UNKNOWN
        )
        await _close_write(recorder, state, executing, status, event.receipt, event.output)
    await _fixture(
        recorder,
        call_id,
        event.name,
        event.arguments,
        event.output,
        event.outcome,
        effect_class,
        preq,
    )
    state.apply_tool(call_id, event.name, event.output)


def _refuse_reserved(sequence: int, name: str) -> None:
    if name == USER_REPLY:
        raise InvalidInputError(
            f"event {sequence}: {USER_REPLY} is reserved; send a user_message event"
        )


async def _open_write(
    recorder: IngestRecorder,
    state: IngestState,
    sequence: int,
    name: str,
    arguments: dict[str, Any],
    idempotency_key: str | None,
    provider_request_id: str | None,
) -> SideEffectRecord:
    """Record the write of client event ``sequence`` PLANNED then EXECUTING."""
    planned = SideEffectRecord(
        side_effect_id=side_effect_id(recorder.run_id, sequence),
        run_id=recorder.run_id,
        step_id=recorder.step_id,
        capability_id=name,
        idempotency_key=idempotency_key or f"idem-{run_key(recorder.run_id, 'idem', sequence)}",
        action_hash=action_hash(name, arguments),
        status=SideEffectStatus.PLANNED,
        provider_request_id=provider_request_id
        or f"preq-{run_key(recorder.run_id, 'preq', sequence)}",
    )
    await _effect(recorder, state, planned)
    executing = planned.model_copy(update={"status": SideEffectStatus.EXECUTING})
    await _effect(recorder, state, executing)
    return executing


async def _close_write(
    recorder: IngestRecorder,
    state: IngestState,
    executing: SideEffectRecord,
    status: SideEffectStatus,
    receipt: str | None,
    output: JsonValue,
) -> None:
    """Record the write's final state, with the output (or its hash) as the receipt."""
    if receipt is None and output is not None:
        receipt = output if isinstance(output, str) else canonical_hash(output)
    final = executing.model_copy(
        update={
            "status": status,
            "provider_receipt": receipt,
            "executed_at": recorder.logical_time()
            if status is SideEffectStatus.CONFIRMED
            else None,
        }
    )
    await _effect(recorder, state, final)


async def _effect(recorder: IngestRecorder, state: IngestState, record: SideEffectRecord) -> None:
    await recorder.record(E.SIDE_EFFECT, record=record, step_id=record.step_id)
    state.track_effect(record)


async def _tool_intent(
    recorder: IngestRecorder, state: IngestState, event: ToolIntentEvent
) -> None:
    """Write-ahead: the write is EXECUTING from now on, until its ``tool_result``."""
    _refuse_reserved(event.sequence, event.name)
    await _open_write(
        recorder,
        state,
        event.sequence,
        event.name,
        event.arguments,
        event.idempotency_key,
        event.provider_request_id,
    )


async def _tool_result(
    recorder: IngestRecorder, state: IngestState, event: ToolResultEvent
) -> None:
    key = side_effect_id(recorder.run_id, event.tool_call_sequence)
    executing = state.open_writes.get(key)
    if executing is None:
        raise InvalidInputError(
            f"event {event.sequence}: tool_call_sequence {event.tool_call_sequence} names no "
            "open write (not a tool_intent, not recorded yet, or already completed)"
        )
    if executing.action_hash != action_hash(event.name, event.arguments):
        raise InvalidInputError(
            f"event {event.sequence}: name and arguments differ from those of the intent "
            f"(event {event.tool_call_sequence})"
        )
    status = event.side_effect_status or _STATUS_OUTCOME.get(
        event.outcome, SideEffectStatus.UNKNOWN
    )
    if status in (SideEffectStatus.PLANNED, SideEffectStatus.EXECUTING):
        raise InvalidInputError(
            f"event {event.sequence}: side_effect_status must be a final state, not {status.value}"
        )
    await _close_write(recorder, state, executing, status, event.receipt, event.output)
    call_id = event.tool_call_id or f"call-{event.tool_call_sequence}"
    await _fixture(
        recorder,
        call_id,
        event.name,
        event.arguments,
        event.output,
        event.outcome,
        SideEffectClass.WRITE,
        executing.provider_request_id,
    )
    state.apply_tool(call_id, event.name, event.output)


#: what an UNKNOWN recorded because the run ended with the write open says
RUN_ENDED_OPEN = "outcome unknown: the run ended before the write's result was recorded"


async def close_open_writes(recorder: IngestRecorder, state: IngestState) -> None:
    """The run ends: every write still EXECUTING (its result never came) becomes UNKNOWN."""
    for executing in list(state.open_writes.values()):
        unknown = executing.model_copy(
            update={"status": SideEffectStatus.UNKNOWN, "provider_receipt": RUN_ENDED_OPEN}
        )
        await _effect(recorder, state, unknown)


async def _fixture(
    recorder: IngestRecorder,
    call_id: str,
    capability_id: str,
    arguments: dict[str, Any],
    output: JsonValue,
    outcome: ToolOutcome,
    effect_class: SideEffectClass,
    provider_request_id: str | None = None,
) -> None:
    fixture = ToolFixture(
        tool_call_id=call_id,
        capability_id=capability_id,
        request_hash=request_hash(capability_id, arguments),
        sanitized_request=arguments,
        sanitized_response=output,
        outcome=outcome,
        started_at=recorder.logical_time(),
        completed_at=recorder.logical_time(),
        provider_request_id=provider_request_id,
        run_id=recorder.run_id,
        step_id=recorder.step_id,
        side_effect_class=effect_class,
    )
    await recorder.record(E.TOOL_CALL, record=fixture)


async def _side_effect_change(
    recorder: IngestRecorder,
    evidence: EvidenceReader,
    state: IngestState,
    event: SideEffectStateEvent,
) -> None:
    key = side_effect_id(recorder.run_id, event.tool_call_sequence)
    try:
        current: SideEffectRecord = state.open_writes.get(key) or await evidence.record(
            SideEffectRecord, key
        )
    except NotFoundError:
        raise InvalidInputError(
            f"event {event.sequence}: event {event.tool_call_sequence} recorded no side effect "
            "(it is not a WRITE tool call, or not recorded yet)"
        ) from None
    updated = current.model_copy(
        update={
            "status": event.status,
            "provider_receipt": event.receipt or current.provider_receipt,
            "reconciled_applied": event.reconciled_applied,
        }
    )
    await _effect(recorder, state, updated)

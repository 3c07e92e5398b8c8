"""One client event → the ledger events our own runtime would have recorded for it.

Steps follow the tool loop (``runtime.tool_loop``): each model call and each user turn is a
step, consecutive tool calls are one ``tools`` step, and every other kind of event joins the
open step, unless the client names the step itself.
"""

from __future__ import annotations

from pydantic import JsonValue

from ingest.recorder import IngestRecorder
from ingest.redaction import sanitized_messages
from ingest.state import IngestState
from ingest.writes import (
    STATUS_OF_OUTCOME,
    close_write,
    open_write,
    record_effect,
    record_fixture,
    record_intent,
    record_result,
    refuse_reserved,
    side_effect_id,
)
from models import (
    ApprovalRecord,
    ExecutionEventType,
    PolicyDecisionRecord,
    RetrievalFixture,
    SideEffectClass,
    SideEffectRecord,
    SideEffectStatus,
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
    tool_schemas,
    user_reply_request,
    user_reply_response,
)

E = ExecutionEventType
_OWN_STEP = {"model_call": MODEL, "user_message": USER}
_STEP_KIND = {**_OWN_STEP, "tool_call": TOOLS, "tool_intent": TOOLS, "tool_result": TOOLS}


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
        await record_fixture(
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
                input_hash=canonical_hash(recorder.hashing_view(event.input)),
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
                action_hash=action_hash(event.capability, recorder.hashing_view(event.arguments)),
                decision=event.decision,
                approved_at=recorder.logical_time(),
                expires_at=event.expires_at,
                run_id=recorder.run_id,
                step_id=recorder.step_id,
            ),
        )
    elif isinstance(event, ToolIntentEvent):
        await record_intent(recorder, state, event)
    elif isinstance(event, ToolResultEvent):
        await record_result(recorder, state, event)
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
    system_prompt = state.system_prompt
    if recorder.redaction is not None:  # the context's message artifacts are sanitized too
        messages = sanitized_messages(recorder.redaction, messages, state.sanitized_messages)
        system_prompt = recorder.redaction.sanitize(system_prompt)
    tools = tool_schemas(state.tools_json)
    _, snapshot = await record_context(
        recorder,
        state.conversation.model_calls + 1,
        system_prompt,
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
    refuse_reserved(event.sequence, event.name)
    declared = state.tool_classes.get(event.name)
    effect_class = event.side_effect_class or SideEffectClass(declared or "WRITE")
    call_id = event.tool_call_id or f"call-{event.sequence}"
    preq: str | None = None
    if effect_class is SideEffectClass.WRITE:
        executing = await open_write(
            recorder,
            state,
            event.sequence,
            event.name,
            event.arguments,
            None,
            event.provider_request_id,
        )
        preq = executing.provider_request_id
        status = event.side_effect_status or STATUS_OF_OUTCOME.get(
            event.outcome, SideEffectStatus.UNKNOWN
        )
        await close_write(recorder, state, executing, status, event.receipt, event.output)
    await record_fixture(
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
    await record_effect(recorder, state, updated)

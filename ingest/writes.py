"""Writes of ingested runs: their side-effect records and fixtures. A ``tool_call`` reports a
write after the fact (PLANNED, EXECUTING and its outcome at once); a ``tool_intent`` opens it
before the client runs it (write-ahead) and its ``tool_result`` closes it; a run that ends with
writes open records them UNKNOWN (``close_open_writes``), and a client that never comes back
leaves them to the side-effect lease sweep (``stores.sql.side_effect_leases``)."""

from __future__ import annotations

from typing import Any

from pydantic import JsonValue

from ingest.recorder import IngestRecorder
from ingest.state import IngestState
from models import (
    ExecutionEventType,
    SideEffectClass,
    SideEffectRecord,
    SideEffectStatus,
    ToolFixture,
    ToolOutcome,
)
from models.canonical import canonical_hash
from models.errors import InvalidInputError
from models.ingest import USER_REPLY, ToolIntentEvent, ToolResultEvent
from runtime.approvals import action_hash
from runtime.tool_loop.conversation import run_key
from runtime.tools import request_hash

E = ExecutionEventType
STATUS_OF_OUTCOME = {
    ToolOutcome.SUCCESS: SideEffectStatus.CONFIRMED,
    ToolOutcome.ERROR: SideEffectStatus.FAILED,
    ToolOutcome.DENIED: SideEffectStatus.FAILED,
    ToolOutcome.TIMEOUT: SideEffectStatus.UNKNOWN,
    ToolOutcome.UNKNOWN: SideEffectStatus.UNKNOWN,
}


def side_effect_id(run_id: str, tool_call_sequence: int) -> str:
    return f"se-{run_key(run_id, 'side-effect', tool_call_sequence)}"


def refuse_reserved(sequence: int, name: str) -> None:
    if name == USER_REPLY:
        raise InvalidInputError(
            f"event {sequence}: {USER_REPLY} is reserved; send a user_message event"
        )


async def open_write(
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
        action_hash=action_hash(name, recorder.hashing_view(arguments)),
        status=SideEffectStatus.PLANNED,
        provider_request_id=provider_request_id
        or f"preq-{run_key(recorder.run_id, 'preq', sequence)}",
    )
    await record_effect(recorder, state, planned)
    executing = planned.model_copy(update={"status": SideEffectStatus.EXECUTING})
    await record_effect(recorder, state, executing)
    return executing


async def close_write(
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
    await record_effect(recorder, state, final)


async def record_effect(
    recorder: IngestRecorder, state: IngestState, record: SideEffectRecord
) -> None:
    await recorder.record(E.SIDE_EFFECT, record=record, step_id=record.step_id)
    state.track_effect(record)


async def record_intent(
    recorder: IngestRecorder, state: IngestState, event: ToolIntentEvent
) -> None:
    """Write-ahead: the write is EXECUTING from now on, until its ``tool_result``."""
    refuse_reserved(event.sequence, event.name)
    key = event.idempotency_key
    if key is not None and key in state.idempotency_keys:
        raise InvalidInputError(
            f"event {event.sequence}: idempotency_key {key!r} already names another write of "
            "this run (one key, one write)"
        )
    await open_write(
        recorder,
        state,
        event.sequence,
        event.name,
        event.arguments,
        event.idempotency_key,
        event.provider_request_id,
    )


async def record_result(
    recorder: IngestRecorder, state: IngestState, event: ToolResultEvent
) -> None:
    key = side_effect_id(recorder.run_id, event.tool_call_sequence)
    executing = state.open_writes.get(key)
    if executing is None:
        raise InvalidInputError(
            f"event {event.sequence}: tool_call_sequence {event.tool_call_sequence} names no "
            "open write (not a tool_intent, not recorded yet, or already completed)"
        )
    if executing.action_hash != action_hash(event.name, recorder.hashing_view(event.arguments)):
        raise InvalidInputError(
            f"event {event.sequence}: name and arguments differ from those of the intent "
            f"(event {event.tool_call_sequence})"
        )
    status = event.side_effect_status or STATUS_OF_OUTCOME.get(
        event.outcome, SideEffectStatus.UNKNOWN
    )
    if status in (SideEffectStatus.PLANNED, SideEffectStatus.EXECUTING):
        raise InvalidInputError(
            f"event {event.sequence}: side_effect_status must be a final state, not {status.value}"
        )
    await close_write(recorder, state, executing, status, event.receipt, event.output)
    call_id = event.tool_call_id or f"call-{event.tool_call_sequence}"
    await record_fixture(
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
        await record_effect(recorder, state, unknown)


async def record_fixture(
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
        # over the sanitized view, as the recorder runtime hashes (a replay sees that view)
        request_hash=request_hash(capability_id, recorder.hashing_view(arguments)),
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

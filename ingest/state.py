"""Where an ingested run stands, rebuilt from its ledger: which client events are recorded
(and with what content), the open step, and the conversation so far.

A process keeps the state of the runs it ingested last (``IngestStates``), keyed by the
ledger head it was built at: the next batch appends conditionally on that head, so a state
made stale by another writer (another API process) is found out by the append's conflict and
only then rebuilt. A batch therefore costs the same at event 10 and at event 100,000."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from weakref import WeakKeyDictionary

from ingest.recorder import marker_of_id
from ingest.redaction import SanitizedViews
from models import ExecutionEventType, RunRecord, SideEffectRecord, SideEffectStatus
from models.errors import InvalidInputError
from models.ingest import TOOL_LOOP_GRAPH_ID
from models.model_call import ChatMessage, ModelResponse
from runtime.ports import ArtifactStore, IngestLedger
from runtime.tool_loop.context import KnownContext
from runtime.tool_loop.conversation import (
    MODEL,
    START,
    TOOLS,
    USER,
    LoopInput,
    LoopState,
    after_model,
    after_tools,
    after_user,
    assistant_message,
    is_user_reply,
    tool_message_content,
)

E = ExecutionEventType
_READ = frozenset(
    {
        E.RUN_STARTED,
        E.PROMPT_COMPILED,
        E.MODEL_CALL,
        E.TOOL_CALL,
        E.STEP_STARTED,
        E.STEP_COMPLETED,
        E.RUN_COMPLETED,
        E.RUN_FAILED,
        E.SIDE_EFFECT,
    }
)
#: a write in these states has no outcome yet (``tool_intent`` without its ``tool_result``)
_OPEN = frozenset({SideEffectStatus.PLANNED, SideEffectStatus.EXECUTING})


@dataclass
class IngestState:
    run: RunRecord
    loop: LoopInput
    head: int
    #: client sequence -> content digest of every recorded client event (0: the header)
    recorded: dict[int, str] = field(default_factory=dict)
    step: str | None = None
    steps: int = 0
    ended: bool = False
    conversation: LoopState = field(default_factory=LoopState)
    system_prompt: str | None = None
    #: tool name -> "READ" | "WRITE" as declared in the header
    tool_classes: dict[str, str] = field(default_factory=dict)
    #: the header's tools as offered to the model
    tools_json: list[dict[str, Any]] = field(default_factory=list)
    #: what the last step did, for deciding how the loop ended
    last_response: ModelResponse | None = None
    last_tools: list[str] = field(default_factory=list)
    last_done: bool = False
    #: side effect id -> the record of every write still without an outcome
    open_writes: dict[str, SideEffectRecord] = field(default_factory=dict)
    #: idempotency key -> side effect id of every write of the run (a key names one write)
    idempotency_keys: dict[str, str] = field(default_factory=dict)

    #: the highest client sequence recorded (kept, not recomputed: a batch stays O(batch))
    top: int = 0
    #: canonical message bytes -> artifact digest of the conversation's messages stored so
    #: far: a model call's context snapshot stores only the messages that are new
    stored_messages: dict[bytes, str] = field(default_factory=dict)
    #: what the last context snapshot recorded (``record_context``): the next one costs the
    #: messages after it (a rebuilt state knows none: its first snapshot lists them all)
    context: KnownContext = field(default_factory=KnownContext)
    #: the conversation's messages and their sanitized views (``sanitized_messages``)
    sanitized_messages: SanitizedViews = field(default_factory=SanitizedViews)
    #: the people (pseudonyms) this process made subjects of the run: a batch naming them
    #: again registers nobody (a rebuilt state knows none: the ledger inserts only those
    #: the run does not have)
    subjects: set[str] = field(default_factory=set)

    @property
    def next_sequence(self) -> int:
        return self.top + 1

    def note(self, sequence: int, digest: str) -> None:
        """Client event ``sequence`` is recorded with content ``digest``."""
        self.recorded[sequence] = digest
        self.top = max(self.top, sequence)

    @property
    def is_tool_loop(self) -> bool:
        return self.run.graph_id == TOOL_LOOP_GRAPH_ID

    # the same bookkeeping as the loop's graph, so the outcome is decided the same way
    def apply_model(self, response: ModelResponse) -> None:
        self.conversation.model_calls += 1
        self.conversation.messages.append(assistant_message(response))
        if not response.tool_calls:
            self.conversation.answers += 1
        self.last_response = response

    def apply_tool(self, tool_call_id: str | None, name: str, output: Any) -> None:
        self.conversation.messages.append(
            ChatMessage(
                role="tool",
                content=tool_message_content(output),
                tool_call_id=tool_call_id,
                name=name,
            )
        )
        self.last_tools.append(name)

    def apply_user(self, content: str | None, done: bool) -> None:
        self.conversation.user_turns += 1
        self.conversation.messages.append(ChatMessage(role="user", content=content))
        self.last_done = done

    def track_effect(self, record: SideEffectRecord) -> None:
        self.idempotency_keys[record.idempotency_key] = record.side_effect_id
        if record.status in _OPEN:
            self.open_writes[record.side_effect_id] = record
        else:
            self.open_writes.pop(record.side_effect_id, None)

    def begin_step(self, step: str) -> None:
        self.step = step
        self.steps += 1
        self.last_tools = []

    def ended_by(self) -> str:
        """Why the loop would stop after the last recorded step ("stopped" when the loop would
        go on: the source stopped where the loop's rules do not, e.g. an undeclared limit)."""
        loop, conv = self.loop, self.conversation
        if self.step == MODEL and self.last_response is not None:
            nxt, why = after_model(loop, conv, self.last_response)
        elif self.step == TOOLS:
            nxt, why = after_tools(loop, conv, self.last_tools)
        elif self.step == USER:
            nxt, why = after_user(loop, conv, self.last_done)
        else:
            nxt, why = START, None
        return why if nxt is None and why else "stopped"


async def load_ingest_state(
    ledger: IngestLedger, artifacts: ArtifactStore, run_id: str
) -> IngestState:
    run = await ledger.get_run(run_id)
    # one statement: the markers, the conversation and the head are of the same moment, so
    # the append conditional on this head cannot pass over a concurrent writer's events
    loaded = await ledger.events_with_payloads_of(run_id, _READ)
    return await state_from_events(
        run,
        [(e.sequence, e.type, e.step_id, e.event_id, data) for e, data in loaded],
        artifacts,
    )


#: (sequence, type, step id, event id, payload bytes of the types ingestion reads)
LoadedEvent = tuple[int, ExecutionEventType, str, str, bytes | None]


class ArtifactReader(Protocol):
    """Where ``state_from_events`` reads a run's tools and system prompt (an artifact store)."""

    async def get(self, digest: str) -> bytes: ...


async def state_from_events(
    run: RunRecord, loaded: Sequence[LoadedEvent], artifacts: ArtifactReader
) -> IngestState:
    """The state after ``loaded``, the run's events in order (read back, or just written)."""
    run_id = run.run_id
    state = IngestState(run=run, loop=LoopInput(), head=loaded[-1][0] if loaded else 0)
    for _sequence, type_, step_id, event_id, data in loaded:
        marker = marker_of_id(run_id, event_id)
        if marker is not None:  # every type of event counts (opaque, checkpoint, policy…)
            state.note(marker.sequence, marker.digest)
        if type_ not in _READ:
            continue
        payload = json.loads(data or b"null")
        if type_ is E.RUN_STARTED:
            state.loop = LoopInput.from_json(payload.get("input"))
            state.conversation = LoopState(messages=list(state.loop.initial_messages))
            if state.loop.tools_ref:
                tools = json.loads(await artifacts.get(state.loop.tools_ref))
                state.tools_json = tools
                state.tool_classes = {t["name"]: t["side_effect_class"] for t in tools}
            if state.loop.system_prompt_ref:
                state.system_prompt = (await artifacts.get(state.loop.system_prompt_ref)).decode()
        elif type_ is E.PROMPT_COMPILED:
            state.conversation.prompt_artifact_id = payload["artifact_id"]
        elif type_ is E.STEP_STARTED:
            state.begin_step(step_id)
        elif type_ is E.MODEL_CALL:
            state.apply_model(ModelResponse.model_validate(payload["response"]))
        elif type_ is E.TOOL_CALL:
            response = payload.get("sanitized_response")
            if is_user_reply(payload["capability_id"]):
                reply = response if isinstance(response, dict) else {}
                state.apply_user(reply.get("content"), bool(reply.get("done")))
            else:
                state.apply_tool(payload.get("tool_call_id"), payload["capability_id"], response)
        elif type_ is E.SIDE_EFFECT:
            state.track_effect(SideEffectRecord.model_validate(payload))
        elif type_ in (E.RUN_COMPLETED, E.RUN_FAILED):
            state.ended = True
    if not state.recorded:
        raise InvalidInputError(f"run {run_id!r} was not created by ingestion")
    return state


def is_read(type_: ExecutionEventType) -> bool:
    """Whether ingestion's state is built from this type's payload."""
    return type_ in _READ


class IngestStates:
    """The states of the runs a process ingested last, at most ``limit`` of them. A state is
    taken out while a batch uses it (two batches of one run never share one) and put back
    only after its batch was appended, at the new head; a batch that fails drops it."""

    def __init__(self, limit: int = 1024) -> None:
        self.limit = limit
        self._states: OrderedDict[str, IngestState] = OrderedDict()

    def take(self, run_id: str) -> IngestState | None:
        return self._states.pop(run_id, None)

    def keep(self, state: IngestState) -> None:
        if state.ended:  # nothing more is appended to an ended run
            return
        run_id = state.run.run_id
        held = self._states.get(run_id)
        if held is not None and held.head > state.head:
            return  # a later batch (of a concurrent caller) put a newer state back already
        self._states[run_id] = state
        self._states.move_to_end(run_id)
        while len(self._states) > self.limit:
            self._states.popitem(last=False)

    def __len__(self) -> int:
        return len(self._states)


#: one cache per ledger object (an API process has one; tests open many)
_CACHES: WeakKeyDictionary[object, IngestStates] = WeakKeyDictionary()


def states_of(ledger: object) -> IngestStates:
    states = _CACHES.get(ledger)
    if states is None:
        states = _CACHES[ledger] = IngestStates()
    return states

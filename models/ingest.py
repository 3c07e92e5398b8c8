"""The ingestion format: how an agent that does not run on Replaybook's runtime reports a run.

A client creates the run with an ``IngestRunHeader`` (``POST /api/runs``) and then sends its
events in order (``POST /api/runs/{id}/events`` with an ``IngestEventBatch``). Every event carries
the client's own ``sequence`` (1, 2, 3, … per run): resending an event that is already recorded
is accepted and changes nothing; another event under a recorded sequence is refused
(``SequenceConflictError``, HTTP 409). ``docs/ingest-format.md`` describes the format with
examples; these records are its schema (and the OpenAPI schema of the API).

Chat-with-tools runs (``graph_id`` ``tool-loop``) are replayed by the generic tool-calling loop
(``runtime.tool_loop``): model call → tool calls → results → model, with user turns answered
from the recorded ``user.reply`` capability.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    JsonValue,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from models.base import Identifier, Instant, Record, RunId, object_schema
from models.canonical import SAFE_INTEGER_MAX
from models.enums import (
    ApprovalDecision,
    PolicyDecision,
    RunStatus,
    SideEffectClass,
    SideEffectStatus,
    ToolOutcome,
)
from models.evidence import RetrievedEvidence
from models.execution import EnvironmentManifest, PinnedVersions, SourceCodeManifest
from models.model_call import ChatMessage, TokenUsage, ToolCallRequest

#: the graph id of the generic tool-calling loop that replays ingested chat-with-tools runs
TOOL_LOOP_GRAPH_ID = "tool-loop"
TOOL_LOOP_GRAPH_VERSION = "1"
#: the recorded READ capability that answers a user turn (``{"turn": n}`` → ``{"content", "done"}``)
USER_REPLY = "user.reply"


def is_ingested(graph_id: str, labels: Mapping[str, str]) -> bool:
    """Whether a run was ingested or imported from another system (its labels name the source,
    or it runs on the generic tool loop): its tools are that system's, Replaybook has no
    provider to call them with."""
    return bool(labels.get("source")) or graph_id == TOOL_LOOP_GRAPH_ID


#: how deep ingested JSON may nest (deeper is refused naming where, never a RecursionError)
MAX_DEPTH = 64
#: validation context key (``model_validate_json(raw, context={CHECKED_JSON: True})``): the
#: body's JSON text was checked already for what ``_NoNul`` refuses (``json_text_checked``)
CHECKED_JSON = "replaybook.json_checked"


def json_text_checked(raw: bytes) -> bool:
    """Whether JSON text that ``models.canonical.parse_json`` accepted (no lone surrogate,
    NaN or Infinity) holds nothing else ``_NoNul`` refuses either: no ``\\u0000`` escape (a
    raw NUL is invalid JSON), no run of 16 digits (an integer beyond ±(2**53-1) has one;
    ``parse_json`` lets the canonical text of a double through) and fewer ``[``/``{`` than
    the depth limit. Bounds, counted in strings too: a body they miss is walked as before."""
    return (
        b"\\u0000" not in raw
        and raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH
        and _LONG_DIGITS.search(raw) is None
    )


_LONG_DIGITS = re.compile(rb"[0-9]{16}")


#: a surrogate code point, searched at C speed (every string of a body is checked)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "the NUL character (U+0000) is not allowed in ingested text"
    if _SURROGATE.search(text):
        return "a lone surrogate (U+D800..U+DFFF) is not valid Unicode text"
    return None


def _scalar_problem(value: object) -> str | None:
    if isinstance(value, str):
        return _text_problem(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and abs(value) > SAFE_INTEGER_MAX:
        return f"integer {value} is outside the safe range ±(2**53-1); send it as a string"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a JSON number (NaN and Infinity are refused)"
    return None


def _json_problem(value: object, path: str, depth: int = 0) -> tuple[str, str] | None:
    """The path and problem of the first value ingestion cannot record faithfully: text with
    U+0000 or a lone surrogate, NaN/Infinity, an integer outside the canonical form's safe
    range, nesting deeper than ``MAX_DEPTH``."""
    if depth > MAX_DEPTH:
        return path or "body", f"nested deeper than {MAX_DEPTH} levels"
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            problem = _text_problem(str(key))
            if problem:
                return where, problem
            found = _json_problem(item, where, depth + 1)
            if found:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _json_problem(item, f"{path}[{index}]", depth + 1)
            if found:
                return found
    else:
        problem = _scalar_problem(value)
        if problem:
            return path or "body", problem
    return None


def _clean(value: object, depth: int = 0) -> bool:
    """Whether ``_json_problem`` finds nothing in ``value``: the same checks without building
    the path of every value on the way (only a refused body is walked again, to name it)."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(value, dict):
        for key, item in value.items():
            if _text_problem(str(key)) is not None or not _clean(item, depth + 1):
                return False
        return True
    if isinstance(value, list | tuple):
        for item in value:
            if not _clean(item, depth + 1):
                return False
        return True
    return _scalar_problem(value) is None


class _NoNul(Record):
    """Refused up front, naming the field: U+0000 (PostgreSQL cannot store it), lone
    surrogates, NaN/Infinity, integers outside ±(2**53-1) (no canonical form) and too deep
    nesting; accepting them would fail later, half-recorded, with a store or hashing error."""

    @model_validator(mode="before")
    @classmethod
    def _refuse_nul(cls, data: object, info: ValidationInfo) -> object:
        if info.context is not None and info.context.get(CHECKED_JSON) is True:
            return data  # the body's text was checked (``json_text_checked``)
        found = None if _clean(data) else _json_problem(data, "")
        if found:
            raise ValueError(f"{found[0]}: {found[1]}")
        return data


def _instant_text(value: object) -> object:
    # a number would be read as seconds since 1970: a time the client may never have meant
    if isinstance(value, int | float | Decimal):
        raise ValueError(
            f"must be an ISO 8601 date-time text with a time zone, not the number {value}"
        )
    return value


#: an instant as the ingestion format takes it: ISO 8601 text with a zone, never a number
IngestInstant = Annotated[Instant, BeforeValidator(_instant_text)]

#: the chat roles a model's conversation has (OpenAI's, with ``developer`` and the legacy
#: ``function``; Gemini's ``model``, as its OTel spans carry it): another is refused, not
#: recorded as a conversation no model could have seen
CHAT_ROLES = ("assistant", "developer", "function", "model", "system", "tool", "user")


def _known_role(message: ChatMessage) -> ChatMessage:
    if message.role not in CHAT_ROLES:
        raise ValueError(f"role {message.role!r} is not one of {', '.join(CHAT_ROLES)}")
    return message


#: a message of an ingested conversation (a known role)
IngestMessage = Annotated[ChatMessage, AfterValidator(_known_role)]


class IngestTool(Record):
    """A tool the agent could call, as offered to its model."""

    name: Identifier
    description: str = ""
    #: JSON Schema of the arguments (as offered to the model; ingestion does not validate calls)
    parameters: dict[str, JsonValue] = Field(default_factory=object_schema)
    #: READ or WRITE; when absent the MCP hints decide, and with no hint the tool is WRITE
    side_effect_class: SideEffectClass | None = None
    read_only_hint: StrictBool | None = None
    destructive_hint: StrictBool | None = None


class IngestRunHeader(_NoNul):
    """A run header with its pinned versions (``POST /api/runs``)."""

    #: the client's id for the run (``RUN_ID_PATTERN``); re-sending the same header under it
    #: records no event (``ingest.core.ingest_run``)
    run_id: RunId
    graph_id: Identifier = TOOL_LOOP_GRAPH_ID
    graph_version: Identifier = TOOL_LOOP_GRAPH_VERSION
    #: the agent's logical start time (``logical_time`` of the first events)
    started_at: IngestInstant
    pinned: PinnedVersions = PinnedVersions()
    environment: EnvironmentManifest | None = None
    source_code: SourceCodeManifest | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    #: the compiled system prompt the model saw (stored as the run's prompt artifact)
    system_prompt: str | None = None
    tools: tuple[IngestTool, ...] = ()
    #: messages the conversation starts with besides the system prompt (e.g. the task)
    initial_messages: tuple[IngestMessage, ...] = ()
    #: whether user turns are recorded as ``user_message`` events (a chat with a user)
    user_turns: StrictBool = True
    #: the agent's own limit of model calls; the loop stops there (as the source agent did)
    max_model_calls: StrictInt | None = Field(default=None, ge=1)
    #: tools whose call ends the run (e.g. a hand-off to a human)
    terminate_tools: tuple[str, ...] = ()
    #: without user turns: how many answers without tool calls the agent gives before it ends
    answers_before_end: StrictInt = Field(default=1, ge=1)
    #: JSON documents kept with the run as artifacts (expected behaviour, source outcome, …)
    attachments: dict[str, JsonValue] = Field(default_factory=dict)

    @field_validator("tools")
    @classmethod
    def _one_tool_a_name(cls, tools: tuple[IngestTool, ...]) -> tuple[IngestTool, ...]:
        # the model calls a tool by its name: two of one name (one READ, one WRITE) would leave
        # replay to guess which one a call ran
        names = [tool.name for tool in tools]
        twice = next((name for name in names if names.count(name) > 1), None)
        if twice is not None:
            raise ValueError(f"two tools are named {twice!r}: a tool's name must be unique")
        return tools


# the ingestion format's booleans and counts are strict: ``"yes"`` is not true and ``true``
# is not 1 (a coerced value would be recorded as evidence the client never sent)


class IngestTokenUsage(TokenUsage):
    """A model call's token counts as the client sent them: whole numbers, strictly."""

    prompt_tokens: StrictInt = Field(default=0, ge=0)
    completion_tokens: StrictInt = Field(default=0, ge=0)


class _Event(_NoNul):
    #: the client's sequence number of this event in the run, from 1, without gaps
    sequence: StrictInt = Field(ge=1)
    #: when it happened in the agent's time; defaults to the run's start time
    at: IngestInstant | None = None
    #: the step it belongs to; by default model calls, tool batches and user turns are steps
    step_id: str | None = None

    #: fields added to the format later: left out of the content digest while they hold their
    #: default, so an event an older client recorded is still recognised when it is re-sent
    ADDED_FIELDS: ClassVar[frozenset[str]] = frozenset()

    def digest_body(self) -> dict[str, JsonValue]:
        """The event as its content digest (``ingest.recorder.content_digest``) sees it."""
        body: dict[str, JsonValue] = self.model_dump(mode="json")
        for name in self.ADDED_FIELDS:
            if getattr(self, name) == type(self).model_fields[name].get_default(
                call_default_factory=True
            ):
                body.pop(name, None)
        return body


class ModelCallEvent(_Event):
    """One model call. ``messages`` is what the model saw besides the system prompt; when
    omitted it is the conversation so far as recorded."""

    type: Literal["model_call"] = "model_call"
    model: str
    messages: tuple[IngestMessage, ...] | None = None
    content: str | None = None
    tool_calls: tuple[ToolCallRequest, ...] = ()
    finish_reason: str | None = None
    usage: IngestTokenUsage = IngestTokenUsage()
    cost: Decimal = Field(default=Decimal(0), ge=0)
    response_id: str | None = None
    #: the sampling seed the request was sent with
    seed: StrictInt | None = None
    #: the request's other parameters as sent (temperature, top_p, max_tokens, tool_choice,
    #: response_format, stream…)
    parameters: dict[str, JsonValue] = Field(default_factory=dict)
    #: how long the call took in the agent, in milliseconds
    latency_ms: StrictFloat | None = Field(default=None, ge=0)

    ADDED_FIELDS: ClassVar[frozenset[str]] = frozenset({"seed", "parameters", "latency_ms"})


class ToolCallEvent(_Event):
    """One executed tool call with its result. A WRITE becomes a side effect too."""

    type: Literal["tool_call"] = "tool_call"
    tool_call_id: str | None = None
    name: Identifier
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    #: the result as the agent received it (a string or any JSON value)
    output: JsonValue = None
    outcome: ToolOutcome = ToolOutcome.SUCCESS
    #: overrides the header's declaration of the tool
    side_effect_class: SideEffectClass | None = None
    #: for a WRITE: CONFIRMED, FAILED (changed nothing) or UNKNOWN; default from ``outcome``
    side_effect_status: SideEffectStatus | None = None
    receipt: str | None = None
    provider_request_id: str | None = None


class ToolIntentEvent(_Event):
    """A WRITE about to run (write-ahead): recorded at once as a side effect ``EXECUTING``, before
    the client runs the tool; a later ``tool_result`` naming this event's ``sequence`` completes
    it. A run that ends with the write still open records it UNKNOWN, and so does the side-effect
    lease sweep when the client never comes back (a killed process): never missing, never
    silently retried."""

    type: Literal["tool_intent"] = "tool_intent"
    tool_call_id: str | None = None
    name: Identifier
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    #: the key the client gave the tool for this intent (default: derived from the run and event)
    idempotency_key: Identifier | None = None
    provider_request_id: str | None = None


class ToolResultEvent(_Event):
    """The result of the write announced by the ``tool_intent`` event ``tool_call_sequence``:
    its side effect's final state and the tool-call fixture. ``name`` and ``arguments`` repeat
    the intent's (checked against its action hash), so the fixture is complete on its own."""

    type: Literal["tool_result"] = "tool_result"
    #: the ``sequence`` of the ``tool_intent`` event this completes
    tool_call_sequence: StrictInt = Field(ge=1)
    tool_call_id: str | None = None
    name: Identifier
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    #: the result as the agent received it (a string or any JSON value)
    output: JsonValue = None
    outcome: ToolOutcome = ToolOutcome.SUCCESS
    #: CONFIRMED, FAILED (changed nothing) or UNKNOWN; default from ``outcome``
    side_effect_status: SideEffectStatus | None = None
    receipt: str | None = None


class UserMessageEvent(_Event):
    """A user turn; recorded as a ``user.reply`` fixture so replay can re-drive the chat."""

    type: Literal["user_message"] = "user_message"
    content: str | None
    #: the user ended the conversation with this message
    done: StrictBool = False


class RetrievalEvent(_Event):
    type: Literal["retrieval"] = "retrieval"
    query: JsonValue
    retriever_version: Identifier
    evidence: tuple[RetrievedEvidence, ...] = ()


class PolicyDecisionEvent(_Event):
    type: Literal["policy_decision"] = "policy_decision"
    policy_id: Identifier
    policy_version: Identifier
    #: the policy's input; for a write, ``{"capability": name, "arguments": {...}}``
    input: JsonValue
    decision: PolicyDecision
    reasons: tuple[str, ...] = ()


class ApprovalEvent(_Event):
    type: Literal["approval"] = "approval"
    approval_id: Identifier
    approver: Identifier
    #: the approved action: the approval is bound to its hash
    capability: Identifier
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    decision: ApprovalDecision = ApprovalDecision.APPROVED
    expires_at: IngestInstant | None = None


class SideEffectStateEvent(_Event):
    """A later state change of a write recorded by an earlier ``tool_call`` event."""

    type: Literal["side_effect"] = "side_effect"
    #: the ``sequence`` of the tool_call event whose side effect changes
    tool_call_sequence: StrictInt = Field(ge=1)
    status: SideEffectStatus
    receipt: str | None = None
    #: with status RECONCILED: whether the effect was applied
    reconciled_applied: StrictBool | None = None


class CheckpointEvent(_Event):
    type: Literal["checkpoint"] = "checkpoint"
    state: dict[str, JsonValue]
    state_schema_version: StrictInt = Field(default=1, ge=1)


class OpaqueEvent(_Event):
    """Something the client (or an importer) could not interpret: kept, never dropped."""

    type: Literal["opaque"] = "opaque"
    source: str
    reason: str
    data: JsonValue = None


class RunEndEvent(_Event):
    type: Literal["run_end"] = "run_end"
    status: RunStatus = RunStatus.COMPLETED
    #: what the source reported as the run's result (kept as ``source_outcome``)
    outcome: JsonValue = None
    error: str | None = None


IngestEvent = Annotated[
    ModelCallEvent
    | ToolCallEvent
    | ToolIntentEvent
    | ToolResultEvent
    | UserMessageEvent
    | RetrievalEvent
    | PolicyDecisionEvent
    | ApprovalEvent
    | SideEffectStateEvent
    | CheckpointEvent
    | OpaqueEvent
    | RunEndEvent,
    Field(discriminator="type"),
]


class IngestEventBatch(_NoNul):
    """Events of one run, in sequence order (``POST /api/runs/{id}/events``)."""

    events: tuple[IngestEvent, ...] = Field(min_length=1)


class IngestResult(Record):
    run_id: Identifier
    #: events recorded by this call
    recorded: int = 0
    #: events that were already recorded identically (accepted, nothing written)
    duplicates: int = 0
    #: the next client sequence the run expects
    next_sequence: int = 1
    #: the ledger head after this call
    head_sequence: int = 0
    ended: bool = False

"""The generic tool-calling loop's rules, shared by ingestion (which records a foreign run in
the loop's shape) and the loop's graph (which replays it): the loop's input, its state, which
step comes next, and how one model call is recorded.

Keeping both sides on these functions is what makes an ingested run and its replay line up
step for step: the same step ids, the same evidence records, the same outcome.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue

from models import ContextSnapshot, ExecutionEventType, PromptArtifact
from models.canonical import canonical_hash, canonicalize, parse_json
from models.digest import digest_hex, sha256_digest
from models.errors import InvalidInputError
from models.ingest import USER_REPLY
from models.model_call import (
    ChatMessage,
    ModelRequest,
    ModelResponse,
    ToolSchema,
)
from runtime.prompts import approximate_token_count
from runtime.providers.capabilities import compiling_provider, preparing_provider
from runtime.recorder import RunRecorder

START, MODEL, TOOLS, USER = "start", "model", "tools", "user"
#: the template version recorded for a prompt that came with the run instead of a bundle
RECORDED_PROMPT = "recorded/system"


@dataclass(frozen=True)
class LoopInput:
    """What the loop is started with (the run's recorded ``input``)."""

    system_prompt_ref: str | None = None
    tools_ref: str | None = None
    initial_messages: tuple[ChatMessage, ...] = ()
    user_turns: bool = True
    max_model_calls: int | None = None
    terminate_tools: tuple[str, ...] = ()
    answers_before_end: int = 1
    attachments: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "system_prompt_ref": self.system_prompt_ref,
            "tools_ref": self.tools_ref,
            "initial_messages": [m.model_dump(mode="json") for m in self.initial_messages],
            "user_turns": self.user_turns,
            "max_model_calls": self.max_model_calls,
            "terminate_tools": list(self.terminate_tools),
            "answers_before_end": self.answers_before_end,
            "attachments": dict(self.attachments),
        }

    @classmethod
    def from_json(cls, data: Any) -> LoopInput:
        data = data or {}
        return cls(
            system_prompt_ref=data.get("system_prompt_ref"),
            tools_ref=data.get("tools_ref"),
            initial_messages=tuple(
                ChatMessage.model_validate(m) for m in data.get("initial_messages") or ()
            ),
            user_turns=bool(data.get("user_turns", True)),
            max_model_calls=data.get("max_model_calls"),
            terminate_tools=tuple(data.get("terminate_tools") or ()),
            answers_before_end=int(data.get("answers_before_end") or 1),
            attachments=dict(data.get("attachments") or {}),
        )


@dataclass
class LoopState:
    """The conversation so far (without the system prompt) and the loop's counters."""

    messages: list[ChatMessage] = field(default_factory=list)
    model_calls: int = 0
    user_turns: int = 0
    answers: int = 0
    prompt_artifact_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "messages": [m.model_dump(mode="json") for m in self.messages],
            "model_calls": self.model_calls,
            "user_turns": self.user_turns,
            "answers": self.answers,
            "prompt_artifact_id": self.prompt_artifact_id,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LoopState:
        return cls(
            messages=[ChatMessage.model_validate(m) for m in data.get("messages") or ()],
            model_calls=int(data.get("model_calls") or 0),
            user_turns=int(data.get("user_turns") or 0),
            answers=int(data.get("answers") or 0),
            prompt_artifact_id=data.get("prompt_artifact_id"),
        )


# which step comes next -----------------------------------------------------------------------
# Each returns (next step, None) or (None, why the run ended).

Next = tuple[str | None, str | None]


def first_step(loop: LoopInput) -> str:
    """The model speaks first when the conversation already ends with a user message (the
    task); otherwise a recorded user opens it."""
    if loop.initial_messages and loop.initial_messages[-1].role == "user":
        return MODEL
    return USER if loop.user_turns else MODEL


def _limit_reached(loop: LoopInput, state: LoopState) -> bool:
    return loop.max_model_calls is not None and state.model_calls >= loop.max_model_calls


def after_model(loop: LoopInput, state: LoopState, response: ModelResponse) -> Next:
    if response.tool_calls:
        return TOOLS, None
    if loop.user_turns:
        # an answer is always heard by the user (in tau-bench the reply comes with the same
        # environment step); the limit stops the next model call, after the reply
        return USER, None
    if _limit_reached(loop, state):
        return None, "max_model_calls"
    if state.answers >= loop.answers_before_end:
        return None, "answer"
    return MODEL, None


def after_tools(loop: LoopInput, state: LoopState, names: Sequence[str]) -> Next:
    if any(name in loop.terminate_tools for name in names):
        return None, "terminate_tool"
    if _limit_reached(loop, state):
        return None, "max_model_calls"
    return MODEL, None


def after_user(loop: LoopInput, state: LoopState, done: bool) -> Next:
    if done:
        return None, "user"
    if _limit_reached(loop, state):
        return None, "max_model_calls"
    return MODEL, None


def loop_outcome(ended_by: str) -> dict[str, JsonValue]:
    """The run's outcome: how the conversation ended (its wording is compared separately)."""
    return {"ended_by": ended_by}


# messages ----------------------------------------------------------------------------------


def tool_message_content(output: Any) -> str | None:
    """A tool result as the model reads it: strings as they are, other JSON as canonical text."""
    if output is None or isinstance(output, str):
        return output
    return canonicalize(output).decode()


def user_reply_response(content: str | None, done: bool) -> dict[str, Any]:
    return {"content": content, "done": done}


def user_reply_request(turn: int) -> dict[str, int]:
    return {"turn": turn}


def assistant_message(response: ModelResponse) -> ChatMessage:
    return ChatMessage(role="assistant", content=response.content, tool_calls=response.tool_calls)


def tool_schemas(tools_json: Any) -> tuple[ToolSchema, ...]:
    return tuple(
        ToolSchema(
            name=t["name"],
            description=t.get("description") or "",
            parameters=t.get("parameters") or {"type": "object"},
        )
        for t in tools_json or ()
    )


# recording one model call ------------------------------------------------------------------


def run_key(run_id: str, *parts: object) -> str:
    """A short stable id part: evidence ids are global, so they are derived from the run id."""
    return digest_hex(canonical_hash([run_id, *[str(p) for p in parts]]))[:24]


async def record_prompt(recorder: RunRecorder, system_prompt: str | None) -> str | None:
    """Record the run's compiled system prompt (PROMPT_COMPILED); returns its artifact id."""
    if system_prompt is None:
        return None
    data = system_prompt.encode()
    prompt = PromptArtifact(
        artifact_id=f"prompt-{run_key(recorder.run_id, 'prompt')}",
        template_version=RECORDED_PROMPT,
        compiled_hash=sha256_digest(data),
        content_ref=await recorder.artifacts.put(data),
        token_count=approximate_token_count(system_prompt),
        compiled_at=recorder.logical_time(),
    )
    await recorder.record(ExecutionEventType.PROMPT_COMPILED, record=prompt)
    return prompt.artifact_id


async def record_model_response(
    recorder: RunRecorder,
    profile: str,
    prompt_artifact_id: str | None,
    snapshot: ContextSnapshot,
    response: ModelResponse,
    sent: Mapping[str, JsonValue] | None = None,
    seed: int | None = None,
) -> None:
    """The MODEL_CALL event, in the shape of ``runtime.model_gateway``'s; ``sent``: the body
    actually sent when the provider compiled the request (``record_sent_request``); ``seed``:
    the sampling seed the request was sent with (``as_sent``)."""
    await recorder.record(
        ExecutionEventType.MODEL_CALL,
        payload={
            "model_profile": profile,
            "prompt_artifact_id": prompt_artifact_id,
            "context_snapshot_id": snapshot.snapshot_id,
            "request_hash": snapshot.content_hash,
            "seed": seed,
            "response": response.model_dump(mode="json"),
            "usage": {
                "prompt_tokens": response.usage.prompt_tokens,
                "completion_tokens": response.usage.completion_tokens,
            },
            "cost": str(response.cost),
            **(dict(sent) if sent is not None else {}),
        },
    )


def as_sent(provider: object, request: ModelRequest) -> ModelRequest:
    """``request`` as ``provider`` will send it: a live replay's provider
    (``LiveModelProvider.prepared``) sets the replay's sampling seed and fits ``max_tokens`` to
    the budget, so the body recorded as sent is the body the server gets. Wrappers are looked
    through by their ``inner``; a provider that changes nothing returns ``request``."""
    preparing = preparing_provider(provider)
    return request if preparing is None else preparing.prepared(request)


async def record_sent_request(
    recorder: RunRecorder, provider: object, request: ModelRequest
) -> dict[str, str] | None:
    """The body a provider that offers the tools in the prompt (``tool_calling: "prompt"``)
    sends for ``request``: stored, with its hash, for the MODEL_CALL event (``None`` for any
    other provider, whose request is the snapshot's). Wrappers (budget, replay) are looked
    through by their ``inner``; in a sandboxed step the provider is the broker's
    ``ProxyModel``, which compiles the body as the worker's provider does."""
    compiling = compiling_provider(provider)
    if compiling is None:
        return None
    body, prompted = compiling.compile(request)
    if not prompted:
        return None
    data = canonicalize(body)
    return {
        "sent_request_ref": await recorder.artifacts.put(data),
        "sent_request_hash": canonical_hash(body),
    }


def is_user_reply(capability_id: str) -> bool:
    return capability_id == USER_REPLY


def parse_arguments(raw: Any) -> dict[str, Any]:
    """Tool-call arguments as a JSON object; text that is not one is kept, not guessed at."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = parse_json(raw) if raw.strip() else {}
        except InvalidInputError:  # not JSON, or JSON without a canonical form
            return {"_unparsed_arguments": raw}
        return value if isinstance(value, dict) else {"_unparsed_arguments": raw}
    return {} if raw is None else {"_unparsed_arguments": raw}

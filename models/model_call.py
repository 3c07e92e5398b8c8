"""Model calls as the runtime sees them, independent of any provider's wire format."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from pydantic import Field, JsonValue

from models.base import Record, object_schema
from models.canonical import canonicalize


class ToolCallRequest(Record):
    """A tool call the model asked for."""

    id: str
    name: str
    arguments: dict[str, JsonValue] = Field(default_factory=dict)


class ChatMessage(Record):
    role: str  # system | user | assistant | tool
    content: str | None = None
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


class ToolSchema(Record):
    """A tool as offered to the model (function-calling schema)."""

    name: str
    description: str = ""
    parameters: dict[str, JsonValue] = Field(default_factory=object_schema)


class ModelRequest(Record):
    model: str
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSchema, ...] = ()
    temperature: float | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    #: sampling seed where the provider supports one
    seed: int | None = None

    def canonical_bytes(self, messages: Sequence[bytes], tools: bytes) -> bytes:
        """``canonicalize(self.model_dump(mode="json"))``, given the canonical bytes of each of
        its messages and of its tools list (as ``canonical_tools``): a conversation serializes
        each message once, not on every call it is sent again.

        The request's other fields are canonicalized as usual around an empty messages list
        and tools list, which are then filled in. ``"messages":[]`` and ``"tools":[]`` occur
        there only as the keys: a quote inside a canonical string is always escaped."""
        head, middle, after = self.canonical_shell()
        return b"".join((head, b",".join(messages), middle, tools, after))

    def canonical_shell(self) -> tuple[bytes, bytes, bytes]:
        """The canonical bytes of the request around its messages and its tools: ``head``
        (up to the messages list's ``[``), ``middle`` (from its ``]`` to the tools value) and
        ``after``, so that the form is ``head + ",".join(messages) + middle + tools + after``.
        The messages come before the tools and ``model`` (keys sort), so a conversation's
        requests share ``head`` and their messages: their hash can continue from the last."""
        shell = canonicalize(
            self.model_copy(update={"messages": (), "tools": ()}).model_dump(mode="json")
        )
        head, found, tail = shell.partition(b'"messages":[]')
        before, found_tools, after = tail.partition(b'"tools":[]')
        if not found or not found_tools:  # pragma: no cover - the shape above is fixed
            raise ValueError("a model request's canonical form has no messages or tools list")
        return head + b'"messages":[', b"]" + before + b'"tools":', after


def canonical_tools(tools: Sequence[ToolSchema]) -> bytes:
    """The canonical bytes of a request's tools list (its catalog hash is their digest)."""
    return canonicalize([tool.model_dump(mode="json") for tool in tools])


class TokenUsage(Record):
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ModelResponse(Record):
    model: str
    content: str | None = None
    tool_calls: tuple[ToolCallRequest, ...] = ()
    finish_reason: str | None = None
    usage: TokenUsage = TokenUsage()
    cost: Decimal = Decimal(0)
    #: the provider's id for the response, when it gives one
    response_id: str | None = None

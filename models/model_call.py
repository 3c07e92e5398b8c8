"""Model calls as the runtime sees them, independent of any provider's wire format."""

from __future__ import annotations

from decimal import Decimal

from pydantic import Field, JsonValue

from models.base import Record, object_schema


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

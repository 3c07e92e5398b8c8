"""The support desk on a real model: a ``ModelProvider`` that asks an OpenAI-compatible endpoint
(a registry model, e.g. the local ``gemma3-270m``) for the planner's and the writer's decisions
as JSON constrained by a schema (``response_format``), so every decision is well formed, and
turns the planner's decision into the tool calls the graph expects.

The model sees exactly the recorded request: the compiled system prompt and the ticket (or the
brief). It decides which CRM lookup identifies the customer, whether to refund and whether to
reply; the arguments come from the ticket (a small model asked to copy ids invents some). The
knowledge-base search is always planned, as in the scripted model. The sampling parameters
are part of the profile recorded with every call.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from models.errors import ModelProviderError
from models.model_call import ModelRequest, ModelResponse, ToolCallRequest

#: sampling of every decision: real variance across seeds, a seed per call
TEMPERATURE = 0.8
PLANNER_MAX_TOKENS = 64
#: room for the longest body the schema allows (a string cut by the limit is not JSON)
WRITER_MAX_TOKENS = 192

LOOKUPS = ("crm.get_customer", "crm.find_by_phone")
PLANNER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "customer_lookup": {"type": "string", "enum": list(LOOKUPS)},
        "refund_order": {"type": "boolean"},
        "send_email": {"type": "boolean"},
    },
    "required": ["customer_lookup", "refund_order", "send_email"],
    "additionalProperties": False,
}
WRITER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "subject": {"type": "string", "maxLength": 60},
        "body": {"type": "string", "maxLength": 400},
    },
    "required": ["subject", "body"],
    "additionalProperties": False,
}


class JsonCompletions(Protocol):
    """An OpenAI-compatible provider that can constrain its answer (``OpenAICompatibleProvider``)."""

    profile: str

    async def complete(
        self, request: ModelRequest, *, response_format: dict[str, Any] | None = None
    ) -> ModelResponse: ...


def _json_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    # llama.cpp's server reads ``schema``; OpenAI's API reads ``json_schema``: both are sent
    return {
        "type": "json_object",
        "schema": schema,
        "json_schema": {"name": name, "schema": schema, "strict": True},
    }


class SupportDeskJsonModel:
    """``ModelProvider`` of the support desk over a real model (see the module docstring)."""

    def __init__(self, name: str, inner: JsonCompletions) -> None:
        self.name = name
        self.inner = inner
        self.profile = (
            f"{inner.profile};decisions=json-schema;temperature={TEMPERATURE};"
            f"max_tokens={PLANNER_MAX_TOKENS}/{WRITER_MAX_TOKENS}"
        )

    async def complete(self, request: ModelRequest) -> ModelResponse:
        system = request.messages[0].content or "" if request.messages else ""
        planner = "ROLE: planner" in system
        schema = PLANNER_SCHEMA if planner else WRITER_SCHEMA
        asked = request.model_copy(
            update={
                "tools": (),  # the decision's schema stands for the tools
                "temperature": TEMPERATURE,
                "max_tokens": PLANNER_MAX_TOKENS if planner else WRITER_MAX_TOKENS,
            }
        )
        response = await self.inner.complete(
            asked, response_format=_json_format("planner" if planner else "reply", schema)
        )
        try:
            decision = json.loads(response.content or "")
        except ValueError:
            # not retryable: asked again with the same seed, it answers the same
            raise ModelProviderError(
                f"model {self.name!r} answered no JSON decision (finish_reason "
                f"{response.finish_reason}): {(response.content or '')[:200]!r}",
                retryable=False,
            ) from None
        if not isinstance(decision, dict):
            raise ModelProviderError(
                f"model {self.name!r} answered {decision!r}, not an object", retryable=False
            )
        if planner:
            ticket = json.loads(request.messages[-1].content or "{}")
            calls = plan_calls(decision, ticket)
            return response.model_copy(
                update={"tool_calls": calls, "content": json.dumps(decision, sort_keys=True)}
            )
        return response.model_copy(update={"content": json.dumps(decision, sort_keys=True)})


def plan_calls(decision: dict[str, Any], ticket: dict[str, Any]) -> tuple[ToolCallRequest, ...]:
    """The planner's tool calls from the model's decision, with the ticket's arguments."""
    calls = [
        ToolCallRequest(
            id="call-kb", name="kb.search", arguments={"query": ticket.get("message", "")}
        )
    ]
    lookup = decision.get("customer_lookup")
    if lookup == "crm.find_by_phone" and ticket.get("phone"):
        calls.append(
            ToolCallRequest(
                id="call-lookup", name="crm.find_by_phone", arguments={"phone": ticket["phone"]}
            )
        )
    else:
        calls.append(
            ToolCallRequest(
                id="call-lookup",
                name="crm.get_customer",
                arguments={"customer_id": ticket.get("customer_id", "")},
            )
        )
    if decision.get("refund_order") is True and ticket.get("order_id"):
        calls.append(
            ToolCallRequest(
                id="call-refund",
                name="payment.refund",
                arguments={
                    "order_id": ticket["order_id"],
                    "amount": ticket.get("amount", 0),
                    "currency": "EUR",
                },
            )
        )
    if decision.get("send_email") is True:
        calls.append(ToolCallRequest(id="call-email", name="email.send", arguments={}))
    return tuple(calls)

"""The reference agent's model: a SCRIPTED STAND-IN for an LLM, labelled as a simulation.

It reads what a real model would read — the compiled system prompt and the conversation —
and decides tool calls. It is deterministic for a sampling seed and stochastic across seeds:
when the prompt does not tell it to identify customers by ``customer_id`` (bundle ``v17``),
it looks them up by phone most of the time, as the incident in the seed describes.
"""

from __future__ import annotations

import json
import random
from decimal import Decimal

from models.model_call import ModelRequest, ModelResponse, TokenUsage, ToolCallRequest

#: how often the scripted model looks a customer up by phone when the prompt allows it
PHONE_LOOKUP_RATE = 0.8
#: EUR per 1k tokens, so budgets and cost reports have something real to add up
PRICE_PER_1K = Decimal("0.002")
ID_RULE = "identify customers by customer_id"


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


class ScriptedSupportModel:
    """``ModelProvider`` of the support desk (a simulation, not an LLM). ``version`` 2 is a
    candidate "model upgrade" that looks customers up by phone far less often."""

    def __init__(self, version: int = 1, phone_lookup_rate: float = PHONE_LOOKUP_RATE) -> None:
        self.version = version
        self.phone_lookup_rate = phone_lookup_rate
        self.profile = f"scripted:support-desk-model@{version} (simulation)"
        self.price_per_1k_tokens = PRICE_PER_1K

    async def complete(self, request: ModelRequest) -> ModelResponse:
        system = request.messages[0].content or ""
        user = next((m.content for m in reversed(request.messages) if m.role == "user"), "") or ""
        rng = random.Random(request.seed)
        if "ROLE: planner" in system:
            calls, content = self._plan(system, json.loads(user), rng), None
        elif "ROLE: writer" in system:
            calls, content = (), self._write(json.loads(user))
        else:
            calls, content = (), "I can only plan and write support replies."
        prompt_tokens = sum(_tokens(m.content or "") for m in request.messages)
        completion_tokens = _tokens(
            content or json.dumps([c.model_dump(mode="json") for c in calls])
        )
        return ModelResponse(
            model=f"support-desk-model@{self.version}",
            content=content,
            tool_calls=calls,
            finish_reason="tool_calls" if calls else "stop",
            usage=TokenUsage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens),
            cost=(PRICE_PER_1K * (prompt_tokens + completion_tokens) / 1000).quantize(
                Decimal("0.000001")
            ),
        )

    def _plan(self, system: str, ticket: dict, rng: random.Random) -> tuple[ToolCallRequest, ...]:
        text = ticket.get("message", "").lower()
        by_id = (
            ID_RULE in system.lower()
            or not ticket.get("phone")
            or rng.random() >= self.phone_lookup_rate
        )
        lookup = (
            ToolCallRequest(
                id="call-lookup",
                name="crm.get_customer",
                arguments={"customer_id": ticket["customer_id"]},
            )
            if by_id
            else ToolCallRequest(
                id="call-lookup", name="crm.find_by_phone", arguments={"phone": ticket["phone"]}
            )
        )
        calls = [
            ToolCallRequest(
                id="call-kb", name="kb.search", arguments={"query": ticket.get("message", "")}
            ),
            lookup,
        ]
        if ("refund" in text or "broken" in text) and ticket.get("order_id"):
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
        if "refund" not in text or "broken" in text:
            calls.append(ToolCallRequest(id="call-email", name="email.send", arguments={}))
        return tuple(calls)

    def _write(self, brief: dict) -> str:
        name = brief["customer"]["name"].split()[0]
        topic = brief.get("topic", "your request")
        facts = " ".join(brief.get("facts", [])[:1])
        return json.dumps(
            {
                "subject": f"About {topic}",
                "body": f"Hello {name},\n\n{facts}\n\nKind regards,\nACME support",
            },
            sort_keys=True,
        )

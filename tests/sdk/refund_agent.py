"""A plain ``openai`` tool loop recorded with the SDK: one READ tool, one WRITE tool. Run in
the tests' process, or as a child (``python tests/sdk/refund_agent.py BASE_URL [--stream] [--run-id ID]``;
with ``REFUND_AGENT_HANG=<file>`` the refund writes that file and then hangs, to be killed
between dispatch and result)."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import openai
import replaybook

SYSTEM = "You are a refund agent. Look the order up before refunding it."
REFUNDS: list[dict[str, Any]] = []


@replaybook.tool(side_effect="read", capability="orders.lookup")
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up.

    Args:
        order_id: the order's id, e.g. A-17
    """
    return {"order_id": order_id, "total": 20.5, "currency": "EUR", "status": "delivered"}


@replaybook.tool(side_effect="write", capability="payment.refund")
def refund(order_id: str, amount: float, reason: str = "customer request") -> dict[str, Any]:
    """Refund an amount of an order to the customer."""
    key = replaybook.idempotency_key()
    hang = os.environ.get("REFUND_AGENT_HANG")
    if hang:
        # written whole, then renamed: the test waits for the file and reads it at once
        with open(f"{hang}.tmp", "w") as marker:
            marker.write(key)
        os.replace(f"{hang}.tmp", hang)
        while True:  # the test kills this process here
            time.sleep(0.05)
    REFUNDS.append({"order_id": order_id, "amount": amount, "key": key})
    return {"refund_id": f"rf-{order_id}", "amount": amount, "idempotency_key": key}


TOOLS: dict[str, Any] = {"lookup_order": lookup_order, "refund": refund}


def chat(client: openai.OpenAI, messages: list[dict[str, Any]], stream: bool) -> dict[str, Any]:
    """One model call; the assistant message as a dict (assembled from chunks if streamed)."""
    kwargs: dict[str, Any] = {
        "model": "scripted",
        "messages": messages,
        "tools": [lookup_order.schema, refund.schema],
        "temperature": 0.0,
        "seed": 7,
    }
    if not stream:
        message = client.chat.completions.create(**kwargs).choices[0].message
        return message.model_dump(exclude_none=True)
    content = ""
    calls: dict[int, dict[str, Any]] = {}
    with client.chat.completions.create(stream=True, **kwargs) as chunks:
        for chunk in chunks:
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            content += delta.content or ""
            for call in delta.tool_calls or []:
                slot = calls.setdefault(
                    call.index,
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                slot["id"] = call.id or slot["id"]
                slot["function"]["name"] += call.function.name or ""
                slot["function"]["arguments"] += call.function.arguments or ""
    assembled: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        assembled["tool_calls"] = [calls[i] for i in sorted(calls)]
    return assembled


def refund_agent(base_url: str, stream: bool = False, run_id: str | None = None) -> str:
    client = replaybook.wrap(openai.OpenAI(base_url=base_url, api_key="none"))
    with replaybook.run(
        agent="refund-bot",
        system_prompt=SYSTEM,
        tools=[lookup_order, refund],
        model="scripted",
        run_id=run_id,
    ) as run:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Please refund order A-17."},
        ]
        for _ in range(5):
            message = chat(client, messages, stream)
            messages.append(message)
            if not message.get("tool_calls"):
                run.outcome = {"answer": message.get("content")}
                break
            for call in message["tool_calls"]:
                fn = TOOLS[call["function"]["name"]]
                result = fn(**json.loads(call["function"]["arguments"]))
                messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
                )
        return run.run_id


if __name__ == "__main__":
    given = sys.argv[sys.argv.index("--run-id") + 1] if "--run-id" in sys.argv else None
    run_id = refund_agent(sys.argv[1], stream="--stream" in sys.argv, run_id=given)
    print(json.dumps({"run_id": run_id}))

"""The support desk the live examples share: one customer's order, a READ tool that looks it
up and a WRITE tool that refunds it, the task, and where the dev stack is.

Each example (``openai_refund``, ``openai_agents_refund``, ``langgraph_refund``,
``pydantic_ai_refund``) runs one small agent of its framework against the dev stack's local
model server (``replaybook dev up``; its ``/v1`` serves native tool calls through
``devstack.tool_front``) and records the run into Replaybook. A refusal (an unknown order, an
amount above what was paid) is a tool result the model reads, not an exception.

Addresses: ``REPLAYBOOK_URL`` / ``REPLAYBOOK_TOKEN`` (the SDK's variables) and
``REPLAYBOOK_LOCAL_MODELS_URL``, else the running dev stack's (``replaybook dev status``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

#: the registered local model every example pins (replays and incidents call it by name)
MODEL = "smollm2-135m"
#: tokens per answer: a tool call is about 30; a reply is cut here rather than rambling
MAX_TOKENS = 96
#: model calls per run at most (a small model may call tools forever)
MAX_TURNS = 3
#: seconds to wait for the API to hold a run ended (the SDK's sender and the OTLP receiver's
#: assembly both work after the agent returns)
RECORDED_TIMEOUT = 60.0
SYSTEM_PROMPT = (
    "You are the support agent of an online shop. Look up an order before refunding it, "
    "and refund at most the amount paid."
)
TASK = "My order A-1001 arrived broken. Please refund it."

ORDERS: dict[str, dict[str, Any]] = {
    "A-1001": {"customer": "Ada Lovelace", "item": "kettle", "status": "delivered", "paid": 25.0},
}
#: refunds made in this process, by idempotency key (a retried refund is the same refund)
REFUNDS: dict[str, dict[str, Any]] = {}


def lookup(order_id: str) -> dict[str, Any]:
    """The order ``order_id``: customer, item, status and amount paid."""
    order = ORDERS.get(order_id.strip().upper())
    if order is None:
        return {"error": f"no order {order_id!r}"}
    return {"order_id": order_id.strip().upper(), **order}


def make_refund(order_id: str, amount: float, key: str) -> dict[str, Any]:
    """Refund ``amount`` of ``order_id`` once per idempotency ``key`` (the receipt)."""
    if key in REFUNDS:
        return REFUNDS[key]
    order = ORDERS.get(order_id.strip().upper())
    if order is None:
        return {"error": f"no order {order_id!r}"}
    if not 0 < amount <= order["paid"]:
        return {"error": f"amount {amount} is not between 0 and the {order['paid']} paid"}
    receipt = {"refund_id": f"rf_{key[-12:]}", "order_id": order_id, "amount": amount}
    REFUNDS[key] = receipt
    return receipt


#: the two tools as an OpenAI ``tools`` list (for the plain ``openai`` loop)
TOOL_SPECS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Look up an order by its id: customer, item, status, amount paid.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "refund",
            "description": "Refund an amount of an order to the customer.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
                "required": ["order_id", "amount"],
            },
        },
    },
]


@dataclass(frozen=True)
class Stack:
    """Where the example sends its model calls and its recording."""

    model_url: str
    api_url: str
    token: str | None


def arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--max-turns", type=int, default=MAX_TURNS)
    return parser.parse_args()


def stack() -> Stack:
    """The addresses from the environment, else from the running dev stack."""
    model_url = os.environ.get("REPLAYBOOK_LOCAL_MODELS_URL")
    api_url = os.environ.get("REPLAYBOOK_URL")
    token = os.environ.get("REPLAYBOOK_TOKEN")
    if not (model_url and api_url):
        status = _dev_status()
        models = status.get("components", {}).get("models") or {}
        model_url = model_url or models.get("address")
        api_url = api_url or status.get("api_url")
        token = token or status.get("dev_token")
    if not (model_url and api_url):
        sys.exit(
            "no dev stack: run `replaybook dev up` (or set REPLAYBOOK_URL and "
            "REPLAYBOOK_LOCAL_MODELS_URL)"
        )
    return Stack(model_url=model_url, api_url=api_url, token=token)


def _dev_status() -> dict[str, Any]:
    cli = Path(sys.executable).with_name("replaybook")
    done = subprocess.run(
        [str(cli), "dev", "status", "--json"], capture_output=True, text=True, timeout=60
    )
    try:
        return dict(json.loads(done.stdout))
    except ValueError:
        return {}


def wait_until_recorded(where: Stack, run_id: str) -> bool:
    """Whether the API holds ``run_id`` ended (not ``RUNNING``) within ``RECORDED_TIMEOUT``:
    what "recorded" means here, whatever the client believes it sent."""
    headers = {"Authorization": f"Bearer {where.token}"} if where.token else {}
    deadline = time.monotonic() + RECORDED_TIMEOUT
    with httpx.Client(base_url=where.api_url, headers=headers, timeout=30) as http:
        while time.monotonic() < deadline:
            answer = http.get(f"/api/runs/{run_id}")
            if answer.status_code == 200 and answer.json().get("status") != "RUNNING":
                return True
            time.sleep(0.2)
    return False


def report(result: dict[str, Any], *, as_json: bool) -> None:
    """Print the result; exit 1 when the agent failed (the run is recorded FAILED) and 2
    when the recording did not reach the server."""
    if as_json:
        print(json.dumps(result, ensure_ascii=False, default=str))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    if not result.get("recorded", True):
        sys.exit(2)
    if result.get("status") == "FAILED":
        sys.exit(1)

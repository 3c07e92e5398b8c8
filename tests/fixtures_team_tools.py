"""An ingested run of the live examples' support desk (``examples/live/desk.py``) for the
team-tools tests (issue 32, item 3): the desk's system prompt and task, its catalogue with
``lookup_order`` and ``shipping_status`` (READ) and ``refund`` (WRITE), and one recorded model
answer that called no tool, so every tool call of a replay is a fixture miss."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from examples.live.desk import SYSTEM_PROMPT, TASK
from ingest import ingest_events, ingest_run
from models import SideEffectClass
from models.ingest import IngestEventBatch, IngestRunHeader, IngestTool
from models.model_call import ChatMessage

#: the recorded run's logical start: the time a team's tool must see, never today's
STARTED = datetime(2025, 3, 2, 9, 30, tzinfo=UTC)
MODULE = "examples.live.desk_replay_tools"
#: what a candidate system prompt adds so the model checks the parcel first
RULE = "Before answering, always call shipping_status with the order id."

_ORDER = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}},
    "required": ["order_id"],
}
DESK_TOOLS = (
    IngestTool(
        name="lookup_order",
        description="Look up an order by its id: customer, item, status, amount paid.",
        parameters=_ORDER,
        side_effect_class=SideEffectClass.READ,
    ),
    IngestTool(
        name="shipping_status",
        description="Where an order's parcel is: carrier, delivery date, damage on arrival.",
        parameters=_ORDER,
        side_effect_class=SideEffectClass.READ,
    ),
    IngestTool(
        name="refund",
        description="Refund an amount of an order to the customer.",
        parameters={
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
            "required": ["order_id", "amount"],
        },
        side_effect_class=SideEffectClass.WRITE,
    ),
)


async def ingest_desk_run(stores: Any, run_id: str, model: str) -> str:
    """Ingest the desk's run under ``run_id`` (its model recorded as ``model``)."""
    header = IngestRunHeader(
        run_id=run_id,
        started_at=STARTED,
        system_prompt=SYSTEM_PROMPT,
        tools=DESK_TOOLS,
        initial_messages=(ChatMessage(role="user", content=TASK),),
        user_turns=False,
        max_model_calls=4,
        labels={"agent": "support-desk-example"},
    )
    await ingest_run(stores.ledger, stores.artifacts, header)
    events = [
        {
            "type": "model_call",
            "model": model,
            "content": "I am sorry your kettle arrived broken. I have asked for a refund.",
            "tool_calls": [],
            "usage": {"prompt_tokens": 60, "completion_tokens": 16},
        },
        {"type": "run_end", "outcome": {"answered": True}},
    ]
    numbered = [
        {**e, "sequence": i, "at": (STARTED + timedelta(seconds=i)).isoformat()}
        for i, e in enumerate(events, start=1)
    ]
    batch = IngestEventBatch.model_validate({"events": numbered})
    await ingest_events(stores.ledger, stores.artifacts, stores.evidence, run_id, batch.events)
    return run_id

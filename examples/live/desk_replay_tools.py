"""The support desk's own read-only tools, as a team hands them to Replaybook
(``--tools-module examples.live.desk_replay_tools``, docs/your-tools.md).

Under ``--on-fixture-miss sandbox-live`` a replay answers a READ call the recording has no
answer for with these functions, run inside the replay's sandbox (no network, a read-only
file system) at the replayed run's logical time. ``refund`` is listed as WRITE so the module
can describe the desk's whole catalogue: a replay never calls it (it answers a WRITE with the
recorded result or a dry run).

Plain functions: nothing of Replaybook is imported. A tool takes the call's arguments and a
context (``run_id``, ``logical_time``, ``tool``) and returns a JSON object.
"""

from __future__ import annotations

from typing import Any

#: the desk's orders as its read replica holds them (a team would read its own test fixture
#: or a snapshot shipped with the module: the sandbox reaches no network)
ORDERS: dict[str, dict[str, Any]] = {
    "A-1001": {"customer": "Ada Lovelace", "item": "kettle", "status": "delivered", "paid": 25.0},
}
SHIPMENTS: dict[str, dict[str, Any]] = {
    "A-1001": {"carrier": "DHL", "delivered_on": "2025-03-01", "damaged_on_arrival": True},
}
#: how a recorded answer shows it came from this module
ANSWERED_BY = "examples.live.desk_replay_tools"
#: calls of the WRITE tool in this process (a test checks it stays 0)
REFUND_CALLS: list[dict[str, Any]] = []


def _order_id(arguments: dict[str, Any]) -> str:
    return str(arguments.get("order_id") or "").strip().upper()


def lookup_order(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    """The order: customer, item, status, amount paid."""
    order = ORDERS.get(_order_id(arguments))
    if order is None:
        return {"error": f"no order {arguments.get('order_id')!r}", "answered_by": ANSWERED_BY}
    return {"order_id": _order_id(arguments), **order, "answered_by": ANSWERED_BY}


def shipping_status(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    """Where the order's parcel is, as of the replayed run's time (never today's)."""
    shipment = SHIPMENTS.get(_order_id(arguments))
    answer: dict[str, Any] = {
        "order_id": _order_id(arguments),
        "as_of": context.logical_time.isoformat(),
        "answered_by": ANSWERED_BY,
    }
    if shipment is None:
        return {**answer, "error": "no shipment for this order"}
    return {**answer, **shipment}


def refund(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    """Refunds money: WRITE, so a replay never calls it."""
    REFUND_CALLS.append(dict(arguments))
    raise RuntimeError("a replay called the refund tool")


REPLAYBOOK_TOOLS = {
    "lookup_order": {"effect": "READ", "call": lookup_order},
    "shipping_status": {"effect": "READ", "call": shipping_status},
    "refund": {"effect": "WRITE", "call": refund},
}

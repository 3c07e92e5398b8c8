"""The desk's two tools recorded by the SDK (``@replaybook.tool``): the lookup as a READ, the
refund as a WRITE whose intent is made durable before it runs and which receives the run's
idempotency key (``replaybook.idempotency_key()``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import replaybook

from examples.live.desk import lookup, make_refund


@replaybook.tool(side_effect="read", capability="orders.lookup")
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by its id: customer, item, status, amount paid."""
    return lookup(order_id)


@replaybook.tool(side_effect="write", capability="payment.refund")
def refund(order_id: str, amount: float) -> dict[str, Any]:
    """Refund an amount of an order to the customer."""
    return make_refund(order_id, amount, replaybook.idempotency_key())


TOOLS: dict[str, Callable[..., dict[str, Any]]] = {"lookup_order": lookup_order, "refund": refund}

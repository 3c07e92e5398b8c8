"""Simulated providers (SIMULATION): a CRM where two customers share a phone number, a payment
provider that files refunds under ``provider_request_id`` and can commit a refund and then lose
the response, and an email provider with message lookup.

Their state lives in the world's own store (the ``world_store.WorldStore`` port, given by the
composition root: tables ``sim_*`` beside the evidence database, never in it), so any later
process — a reconciler, a replay worker, the CLI — can query what really happened. Every call is logged in ``sim_calls``; replay tests count
those rows to prove that no write reached a provider.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from examples.support_desk.world_store import WorldStore
from models.errors import ProviderRejectedError, SideEffectOutcomeUnknownError
from runtime.tools import ToolCallContext

CUSTOMERS = [
    {
        "customer_id": "C-1001",
        "name": "Ada Lovelace",
        "email": "ada@example.com",
        "phone": "+1-555-0100",
    },
    # two customers share one phone number: a lookup by phone is ambiguous
    {
        "customer_id": "C-2001",
        "name": "Bob Martin",
        "email": "bob@example.com",
        "phone": "+1-555-0199",
    },
    {
        "customer_id": "C-2002",
        "name": "Carol Chen",
        "email": "carol@example.com",
        "phone": "+1-555-0199",
    },
    {
        "customer_id": "C-3003",
        "name": "Dan Brown",
        "email": "dan@example.com",
        "phone": "+1-555-0300",
    },
]


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class SimulatedWorld:
    """The simulated outside world of the support desk, on its own store."""

    store: WorldStore
    #: orders whose refund is committed and then answered with a lost response
    drop_refund_response_for: set[str] = field(default_factory=set)

    async def ensure(self) -> None:
        """Create the world's tables and the CRM's customers if they are not there yet."""
        await self.store.ensure(CUSTOMERS)

    # CRM (READ) ---------------------------------------------------------------------------

    async def crm_get_customer(
        self, arguments: dict[str, Any], context: ToolCallContext
    ) -> dict[str, Any]:
        customer_id = arguments["customer_id"]
        async with self.store.call("crm", "get_customer", customer_id, _now()) as call:
            row = await call.customer(customer_id)
        if row is None:
            raise ProviderRejectedError(f"no customer {customer_id}")
        return {"customers": [row]}

    async def crm_find_by_phone(
        self, arguments: dict[str, Any], context: ToolCallContext
    ) -> dict[str, Any]:
        async with self.store.call("crm", "find_by_phone", arguments["phone"], _now()) as call:
            rows = await call.customers_by_phone(arguments["phone"])
        return {"customers": rows}

    # payments (WRITE) -----------------------------------------------------------------------

    async def payment_refund(
        self, arguments: dict[str, Any], context: ToolCallContext
    ) -> dict[str, Any]:
        key, preq = context.idempotency_key, context.provider_request_id
        if not key or not preq:
            raise ProviderRejectedError("refunds need an idempotency key and a provider request id")
        async with self.store.call("payments", "refund", preq, _now()) as call:
            existing = await call.refund_by_key(key)
            if existing is None:
                refund_id = f"rf-{uuid.uuid4().hex[:12]}"
                await call.add_refund(
                    refund_id=refund_id,
                    provider_request_id=preq,
                    idempotency_key=key,
                    order_id=arguments["order_id"],
                    amount=str(arguments["amount"]),
                    currency=arguments.get("currency", "EUR"),
                    created_at=_now(),
                )
            else:
                refund_id = existing["refund_id"]
        if arguments["order_id"] in self.drop_refund_response_for:
            # the refund is committed above; only the answer is lost on its way back
            raise SideEffectOutcomeUnknownError(
                f"payment provider timed out after accepting refund request {preq}"
            )
        return {
            "refund_id": refund_id,
            "receipt": refund_id,
            "provider_request_id": preq,
            "status": "succeeded",
        }

    async def lookup_refund(self, provider_request_id: str) -> dict[str, Any] | None:
        """The provider's query API, for reconciliation (read-only)."""
        async with self.store.call("payments", "lookup", provider_request_id, _now()) as call:
            return await call.refund_by_request(provider_request_id)

    # email (WRITE) --------------------------------------------------------------------------

    async def email_send(
        self, arguments: dict[str, Any], context: ToolCallContext
    ) -> dict[str, Any]:
        key, preq = context.idempotency_key, context.provider_request_id
        if not key or not preq:
            raise ProviderRejectedError("emails need an idempotency key and a provider request id")
        async with self.store.call("email", "send", preq, _now()) as call:
            existing = await call.email_by_key(key)
            if existing is not None:
                return {"message_id": existing["message_id"], "receipt": existing["message_id"]}
            message_id = f"msg-{uuid.uuid4().hex[:12]}"
            await call.add_email(
                message_id=message_id,
                provider_request_id=preq,
                idempotency_key=key,
                recipient=arguments["to"],
                subject=arguments["subject"],
                body=arguments["body"],
                sent_at=_now(),
            )
        return {"message_id": message_id, "receipt": message_id, "provider_request_id": preq}

    async def lookup_email(self, provider_request_id: str) -> dict[str, Any] | None:
        async with self.store.call("email", "lookup", provider_request_id, _now()) as call:
            return await call.email_by_request(provider_request_id)

    # inspection -----------------------------------------------------------------------------

    async def state(self) -> dict[str, Any]:
        """What the providers hold, for ``replaybook examples providers --json``."""
        held = await self.store.contents()
        refunds_per_order: dict[str, int] = {}
        for r in held["refunds"]:
            refunds_per_order[r["order_id"]] = refunds_per_order.get(r["order_id"], 0) + 1
        return {
            "simulation": True,
            "customers": held["customers"],
            "refunds": [
                {
                    "refund_id": r["refund_id"],
                    "provider_request_id": r["provider_request_id"],
                    "order_id": r["order_id"],
                    "amount": r["amount"],
                    "currency": r["currency"],
                    "count_for_order": refunds_per_order[r["order_id"]],
                }
                for r in held["refunds"]
            ],
            "emails": [
                {
                    "message_id": r["message_id"],
                    "provider_request_id": r["provider_request_id"],
                    "to": r["recipient"],
                    "subject": r["subject"],
                }
                for r in held["emails"]
            ],
            "calls": {f"{p}.{o}": n for p, o, n in held["calls"]},
        }

    async def call_count(self, provider: str | None = None, operation: str | None = None) -> int:
        return await self.store.call_count(provider, operation)

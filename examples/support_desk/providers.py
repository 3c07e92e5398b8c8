"""Simulated providers (SIMULATION): a CRM where two customers share a phone number, a payment
provider that files refunds under ``provider_request_id`` and can commit a refund and then lose
the response, and an email provider with message lookup.

Their state lives in the database (tables ``sim_*``), so any later process — a reconciler, a
replay worker, the CLI — can query what really happened. Every call is logged in ``sim_calls``;
replay tests count those rows to prove that no write reached a provider.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
    insert,
    select,
)

from models.errors import ProviderRejectedError, SideEffectOutcomeUnknownError
from runtime.tools import ToolCallContext
from stores.sql.database import Database

metadata = MetaData()

customers = Table(
    "sim_customers",
    metadata,
    Column("customer_id", String(64), primary_key=True),
    Column("name", String(255), nullable=False),
    Column("email", String(255), nullable=False),
    Column("phone", String(64), nullable=False, index=True),
)
refunds = Table(
    "sim_refunds",
    metadata,
    Column("refund_id", String(64), primary_key=True),
    Column("provider_request_id", String(128), nullable=False, unique=True),
    Column("idempotency_key", String(128), nullable=False, unique=True),
    Column("order_id", String(64), nullable=False),
    Column("amount", String(32), nullable=False),
    Column("currency", String(8), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)
emails = Table(
    "sim_emails",
    metadata,
    Column("message_id", String(64), primary_key=True),
    Column("provider_request_id", String(128), nullable=False, unique=True),
    Column("idempotency_key", String(128), nullable=False, unique=True),
    Column("recipient", String(255), nullable=False),
    Column("subject", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("sent_at", DateTime(timezone=True), nullable=False),
)
calls = Table(
    "sim_calls",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("provider", String(32), nullable=False),
    Column("operation", String(64), nullable=False),
    Column("request_key", String(128), nullable=True),
    Column("at", DateTime(timezone=True), nullable=False),
)

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
    """The simulated outside world of the support desk, on one database."""

    db: Database
    #: orders whose refund is committed and then answered with a lost response
    drop_refund_response_for: set[str] = field(default_factory=set)

    async def ensure(self) -> None:
        """Create the tables and the CRM's customers if they are not there yet."""
        async with self.db.transaction() as conn:
            await conn.run_sync(metadata.create_all, checkfirst=True)
            present = {
                r.customer_id for r in (await conn.execute(select(customers.c.customer_id))).all()
            }
            missing = [c for c in CUSTOMERS if c["customer_id"] not in present]
            if missing:
                await conn.execute(insert(customers), missing)

    async def _log(self, conn: Any, provider: str, operation: str, key: str | None) -> None:
        await conn.execute(
            insert(calls).values(provider=provider, operation=operation, request_key=key, at=_now())
        )

    # CRM (READ) ---------------------------------------------------------------------------

    async def crm_get_customer(
        self, arguments: dict[str, Any], context: ToolCallContext
    ) -> dict[str, Any]:
        async with self.db.transaction() as conn:
            await self._log(conn, "crm", "get_customer", arguments["customer_id"])
            row = (
                await conn.execute(
                    select(customers).where(customers.c.customer_id == arguments["customer_id"])
                )
            ).first()
        if row is None:
            raise ProviderRejectedError(f"no customer {arguments['customer_id']}")
        return {"customers": [dict(row._mapping)]}

    async def crm_find_by_phone(
        self, arguments: dict[str, Any], context: ToolCallContext
    ) -> dict[str, Any]:
        async with self.db.transaction() as conn:
            await self._log(conn, "crm", "find_by_phone", arguments["phone"])
            rows = (
                await conn.execute(
                    select(customers)
                    .where(customers.c.phone == arguments["phone"])
                    .order_by(customers.c.customer_id)
                )
            ).all()
        return {"customers": [dict(r._mapping) for r in rows]}

    # payments (WRITE) -----------------------------------------------------------------------

    async def payment_refund(
        self, arguments: dict[str, Any], context: ToolCallContext
    ) -> dict[str, Any]:
        key, preq = context.idempotency_key, context.provider_request_id
        if not key or not preq:
            raise ProviderRejectedError("refunds need an idempotency key and a provider request id")
        async with self.db.transaction() as conn:
            await self._log(conn, "payments", "refund", preq)
            existing = (
                await conn.execute(select(refunds).where(refunds.c.idempotency_key == key))
            ).first()
            if existing is None:
                refund_id = f"rf-{uuid.uuid4().hex[:12]}"
                await conn.execute(
                    insert(refunds).values(
                        refund_id=refund_id,
                        provider_request_id=preq,
                        idempotency_key=key,
                        order_id=arguments["order_id"],
                        amount=str(arguments["amount"]),
                        currency=arguments.get("currency", "EUR"),
                        created_at=_now(),
                    )
                )
            else:
                refund_id = existing.refund_id
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
        async with self.db.transaction() as conn:
            await self._log(conn, "payments", "lookup", provider_request_id)
            row = (
                await conn.execute(
                    select(refunds).where(refunds.c.provider_request_id == provider_request_id)
                )
            ).first()
        return dict(row._mapping) if row else None

    # email (WRITE) --------------------------------------------------------------------------

    async def email_send(
        self, arguments: dict[str, Any], context: ToolCallContext
    ) -> dict[str, Any]:
        key, preq = context.idempotency_key, context.provider_request_id
        if not key or not preq:
            raise ProviderRejectedError("emails need an idempotency key and a provider request id")
        async with self.db.transaction() as conn:
            await self._log(conn, "email", "send", preq)
            existing = (
                await conn.execute(select(emails).where(emails.c.idempotency_key == key))
            ).first()
            if existing is not None:
                return {"message_id": existing.message_id, "receipt": existing.message_id}
            message_id = f"msg-{uuid.uuid4().hex[:12]}"
            await conn.execute(
                insert(emails).values(
                    message_id=message_id,
                    provider_request_id=preq,
                    idempotency_key=key,
                    recipient=arguments["to"],
                    subject=arguments["subject"],
                    body=arguments["body"],
                    sent_at=_now(),
                )
            )
        return {"message_id": message_id, "receipt": message_id, "provider_request_id": preq}

    async def lookup_email(self, provider_request_id: str) -> dict[str, Any] | None:
        async with self.db.transaction() as conn:
            await self._log(conn, "email", "lookup", provider_request_id)
            row = (
                await conn.execute(
                    select(emails).where(emails.c.provider_request_id == provider_request_id)
                )
            ).first()
        return dict(row._mapping) if row else None

    # inspection -----------------------------------------------------------------------------

    async def state(self) -> dict[str, Any]:
        """What the providers hold, for ``replaybook examples providers --json``."""
        async with self.db.read() as conn:
            refund_rows = (await conn.execute(select(refunds).order_by(refunds.c.created_at))).all()
            email_rows = (await conn.execute(select(emails).order_by(emails.c.sent_at))).all()
            counts = (
                await conn.execute(
                    select(calls.c.provider, calls.c.operation, func.count()).group_by(
                        calls.c.provider, calls.c.operation
                    )
                )
            ).all()
            customer_rows = (
                await conn.execute(select(customers).order_by(customers.c.customer_id))
            ).all()
        refunds_per_order: dict[str, int] = {}
        for r in refund_rows:
            refunds_per_order[r.order_id] = refunds_per_order.get(r.order_id, 0) + 1
        return {
            "simulation": True,
            "customers": [dict(r._mapping) for r in customer_rows],
            "refunds": [
                {
                    "refund_id": r.refund_id,
                    "provider_request_id": r.provider_request_id,
                    "order_id": r.order_id,
                    "amount": r.amount,
                    "currency": r.currency,
                    "count_for_order": refunds_per_order[r.order_id],
                }
                for r in refund_rows
            ],
            "emails": [
                {
                    "message_id": r.message_id,
                    "provider_request_id": r.provider_request_id,
                    "to": r.recipient,
                    "subject": r.subject,
                }
                for r in email_rows
            ],
            "calls": {f"{p}.{o}": n for p, o, n in counts},
        }

    async def call_count(self, provider: str | None = None, operation: str | None = None) -> int:
        query = select(func.count()).select_from(calls)
        if provider:
            query = query.where(calls.c.provider == provider)
        if operation:
            query = query.where(calls.c.operation == operation)
        async with self.db.read() as conn:
            return int((await conn.execute(query)).scalar_one())

"""The support desk's ``email.send`` through a transactional outbox and a relay to a broker
(SIMULATION, seed §63's fault windows):

    agent ─ email.send ─▶ provider: call logged + message in ``sim_outbox`` (one commit)
    relay: each unpublished message ─▶ broker (``sim_broker_messages``), then marked published
    consumer: each broker message ─▶ e-mail filed once per idempotency key (``sim_emails``)

Two windows the design must survive: *outbox written, broker send failed* (the relay keeps
the row and retries it on its next pass: one delivery in the end) and *broker delivered
twice* (the relay published and died before marking the row, so it publishes again: the
consumer files the e-mail once, by the idempotency key). The recorded run sees one side
effect either way: the provider answered once, with the outbox message's id.

The broker is a table of the world's store (``stores.sql.support_desk_outbox``); ``FlakyBroker``
stands between the relay and it to lose a publish on the way, as a network would.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from models.errors import ProviderRejectedError
from runtime.tools import ToolCallContext


def _now() -> datetime:
    return datetime.now(UTC)


class OutboxStore(Protocol):
    """Where the outbox, the broker's queue and the consumer's keys live: the world's own
    store (``stores.sql.support_desk_outbox.SqlWorldOutbox``, given by the composition root)."""

    async def accept(
        self,
        outbox_id: str,
        key: str,
        provider_request_id: str,
        payload: dict[str, Any],
        at: datetime,
    ) -> str: ...

    async def pending(self) -> list[dict[str, Any]]: ...

    async def attempted(self, outbox_id: str, at: datetime, error: str | None) -> None: ...

    async def publish(self, message: dict[str, Any], at: datetime) -> int: ...

    async def queued(self, after: int) -> list[dict[str, Any]]: ...

    async def consume(
        self, message: dict[str, Any], email: dict[str, Any], at: datetime
    ) -> bool: ...


class BrokerUnavailableError(ConnectionError):
    """The broker did not take the message (connection refused, reset, timed out)."""


class RelayCrashedError(RuntimeError):
    """The relay died after the broker took a message and before the row was marked."""


class Broker(Protocol):
    async def publish(self, message: dict[str, Any]) -> int: ...


@dataclass
class TableBroker:
    """The broker: its queue is a table of the world's database."""

    store: OutboxStore

    async def publish(self, message: dict[str, Any]) -> int:
        return await self.store.publish(message, _now())


@dataclass
class FlakyBroker:
    """``inner`` behind a link that loses the next ``failures`` publishes."""

    inner: Broker
    failures: int = 0

    async def publish(self, message: dict[str, Any]) -> int:
        if self.failures > 0:
            self.failures -= 1
            raise BrokerUnavailableError("broker connection reset before the message was taken")
        return await self.inner.publish(message)


@dataclass
class OutboxEmail:
    """The ``email.send`` provider: accepts a send by writing the outbox (no e-mail yet)."""

    store: OutboxStore

    async def email_send(
        self, arguments: dict[str, Any], context: ToolCallContext
    ) -> dict[str, Any]:
        key, preq = context.idempotency_key, context.provider_request_id
        if not key or not preq:
            raise ProviderRejectedError("emails need an idempotency key and a provider request id")
        message = {k: arguments[k] for k in ("to", "subject", "body")}
        outbox_id = await self.store.accept(
            f"msg-{uuid.uuid4().hex[:12]}", key, preq, message, _now()
        )
        return {"message_id": outbox_id, "receipt": outbox_id, "provider_request_id": preq}


@dataclass
class Relay:
    """Publishes the outbox's unpublished messages; a failed publish leaves the row for the
    next pass. ``crash_after_publish``: die once after the broker took a message (a test of
    the window where the broker ends up with it twice)."""

    store: OutboxStore
    broker: Broker
    crash_after_publish: bool = False

    async def relay_once(self) -> int:
        """One pass over the unpublished messages: how many were published."""
        published = 0
        for row in await self.store.pending():
            message = {
                "outbox_id": row["outbox_id"],
                "idempotency_key": row["idempotency_key"],
                "payload": row["payload"],
            }
            try:
                await self.broker.publish(message)
            except BrokerUnavailableError as exc:
                await self.store.attempted(row["outbox_id"], _now(), str(exc))
                continue
            if self.crash_after_publish:
                self.crash_after_publish = False
                raise RelayCrashedError(f"relay died after publishing {row['outbox_id']}")
            await self.store.attempted(row["outbox_id"], _now(), None)
            published += 1
        return published


@dataclass
class MailConsumer:
    """Takes the broker's messages in order and files each e-mail once per idempotency key."""

    store: OutboxStore
    cursor: int = 0
    seen: dict[str, int] = field(default_factory=lambda: {"filed": 0, "duplicates": 0})

    async def drain(self) -> dict[str, int]:
        for message in await self.store.queued(self.cursor):
            payload = json.loads(message["payload"])
            email = {
                "message_id": message["outbox_id"],
                "provider_request_id": f"outbox-{message['outbox_id']}",
                "idempotency_key": message["idempotency_key"],
                "recipient": payload["to"],
                "subject": payload["subject"],
                "body": payload["body"],
                "sent_at": _now(),
            }
            filed = await self.store.consume(message, email, _now())
            self.seen["filed" if filed else "duplicates"] += 1
            self.cursor = message["seq"]
        return dict(self.seen)

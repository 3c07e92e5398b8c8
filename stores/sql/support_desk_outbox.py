"""The support desk's e-mail delivered through a transactional outbox (SIMULATION, seed §63):
the tables of the outbox, of a table-backed message broker and of the mail consumer's
idempotency keys, on the simulated world's own engine (``SqlWorldStore``), beside ``sim_*``.

- ``sim_outbox``: the provider accepts a send by writing the message here in the same
  transaction that logs the call; a relay publishes it later (``attempts``, ``last_error``,
  ``published_at``).
- ``sim_broker_messages``: the broker's queue, at least once: the same message may be on it
  twice (a relay that published and died before marking the row).
- ``sim_mail_consumed``: the consumer's processed idempotency keys; the e-mail (``sim_emails``,
  the side effect) is filed in the same transaction as its key, so a second delivery of the
  same message files nothing.

The broker is a table in the world's own database (SQLite or PostgreSQL), not a separate
server: the project's tests and CI start no broker.
"""

from __future__ import annotations

import json
from datetime import datetime
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
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from stores.sql.support_desk_world import SqlWorldStore, calls, emails

outbox_metadata = MetaData()

outbox = Table(
    "sim_outbox",
    outbox_metadata,
    Column("outbox_id", String(64), primary_key=True),
    Column("idempotency_key", String(128), nullable=False, unique=True),
    Column("provider_request_id", String(128), nullable=False),
    Column("payload", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("last_error", Text, nullable=True),
    Column("published_at", DateTime(timezone=True), nullable=True),
)
broker_messages = Table(
    "sim_broker_messages",
    outbox_metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("outbox_id", String(64), nullable=False),
    Column("idempotency_key", String(128), nullable=False),
    Column("payload", Text, nullable=False),
    Column("published_at", DateTime(timezone=True), nullable=False),
)
mail_consumed = Table(
    "sim_mail_consumed",
    outbox_metadata,
    Column("idempotency_key", String(128), primary_key=True),
    Column("seq", Integer, nullable=False),
    Column("message_id", String(64), nullable=False),
    Column("consumed_at", DateTime(timezone=True), nullable=False),
)


class SqlWorldOutbox:
    """The outbox, the broker's queue and the consumer's keys on ``world``'s engine."""

    def __init__(self, world: SqlWorldStore) -> None:
        self.world = world

    async def ensure(self) -> None:
        async with self.world.transaction() as conn:
            await conn.run_sync(outbox_metadata.create_all, checkfirst=True)

    async def accept(
        self,
        outbox_id: str,
        key: str,
        provider_request_id: str,
        payload: dict[str, Any],
        at: datetime,
    ) -> str:
        """The send accepted: the call logged and the message written, one transaction; an
        idempotency key seen before answers its first message's id and writes nothing."""
        async with self.world.transaction() as conn:
            await conn.execute(
                insert(calls).values(
                    provider="email", operation="send", request_key=provider_request_id, at=at
                )
            )
            found = (
                await conn.execute(
                    select(outbox.c.outbox_id).where(outbox.c.idempotency_key == key)
                )
            ).scalar_one_or_none()
            if found is not None:
                return str(found)
            await conn.execute(
                insert(outbox).values(
                    outbox_id=outbox_id,
                    idempotency_key=key,
                    provider_request_id=provider_request_id,
                    payload=json.dumps(payload, sort_keys=True),
                    created_at=at,
                    attempts=0,
                )
            )
        return outbox_id

    async def pending(self) -> list[dict[str, Any]]:
        """The messages not published yet, oldest first."""
        async with self.world.transaction() as conn:
            rows = await conn.execute(
                select(outbox).where(outbox.c.published_at.is_(None)).order_by(outbox.c.created_at)
            )
            return [dict(r._mapping) for r in rows]

    async def attempted(self, outbox_id: str, at: datetime, error: str | None) -> None:
        """One publish attempt: published (``error`` None) or failed with ``error``."""
        values: dict[str, Any] = {"attempts": outbox.c.attempts + 1, "last_error": error}
        if error is None:
            values["published_at"] = at
        async with self.world.transaction() as conn:
            await conn.execute(update(outbox).where(outbox.c.outbox_id == outbox_id).values(values))

    async def publish(self, message: dict[str, Any], at: datetime) -> int:
        """The broker takes ``message`` onto its queue: its sequence number."""
        async with self.world.transaction() as conn:
            done = await conn.execute(
                insert(broker_messages).values(
                    outbox_id=message["outbox_id"],
                    idempotency_key=message["idempotency_key"],
                    payload=message["payload"],
                    published_at=at,
                )
            )
            key = done.inserted_primary_key
            assert key is not None  # an INSERT of one row always has its key
            return int(key[0])

    async def queued(self, after: int) -> list[dict[str, Any]]:
        """The broker's messages after sequence ``after``, in order (what it delivers)."""
        async with self.world.transaction() as conn:
            rows = await conn.execute(
                select(broker_messages)
                .where(broker_messages.c.seq > after)
                .order_by(broker_messages.c.seq)
            )
            return [dict(r._mapping) for r in rows]

    async def consume(self, message: dict[str, Any], email: dict[str, Any], at: datetime) -> bool:
        """File ``email`` for ``message`` unless its idempotency key was consumed before (one
        transaction): whether this delivery filed it."""
        insert_key = pg_insert if self.world.is_postgresql else sqlite_insert
        async with self.world.transaction() as conn:
            claimed = await conn.execute(
                insert_key(mail_consumed)
                .values(
                    idempotency_key=message["idempotency_key"],
                    seq=message["seq"],
                    message_id=email["message_id"],
                    consumed_at=at,
                )
                .on_conflict_do_nothing(index_elements=["idempotency_key"])
            )
            if claimed.rowcount != 1:
                return False
            await conn.execute(insert(emails).values(**email))
            return True

    async def counts(self, key: str) -> dict[str, int]:
        """For one idempotency key: outbox rows, broker messages, consumed keys, e-mails."""
        async with self.world.transaction() as conn:
            out: dict[str, int] = {}
            for name, table in (
                ("outbox", outbox),
                ("broker", broker_messages),
                ("consumed", mail_consumed),
                ("emails", emails),
            ):
                query = select(func.count()).select_from(table)
                out[name] = int(
                    (await conn.execute(query.where(table.c.idempotency_key == key))).scalar_one()
                )
            return out

"""The simulated support-desk world's own small store (SIMULATION state, not evidence).

``examples/support_desk/world_store.py`` is the port; this is its SQL implementation. The
CRM's customers, the refunds and emails the providers filed and the log of every call (tables
``sim_*``) live apart from the evidence, on an engine of their own — never the evidence
database's engine:

- SQLite (the embedded deployment): the file ``support-desk-world.db`` in the directory of the
  evidence database — ``$REPLAYBOOK_HOME/support-desk-world.db`` by default.
- PostgreSQL: the same server and database as the evidence (so a worker on another host sees
  what the CLI's run filed), in a schema of its own, ``support_desk_world``.

Every process that opens the world beside the same evidence database (the CLI, a worker's
reconcilers, a replay's READ providers) sees the same state. Connections are not pooled: each
operation opens and closes its own, so a world store holds nothing open between calls.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
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
    text,
)
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool

from models.errors import StoreError
from stores.sql.database import install_sqlite_pragmas, normalize_database_url

__all__ = [
    "WORLD_FILE",
    "WORLD_SCHEMA",
    "DatabaseUrl",
    "SqlWorldCall",
    "SqlWorldStore",
    "calls",
    "customers",
    "emails",
    "refunds",
    "world_url_beside",
]

#: an evidence database's URL, as a string or as SQLAlchemy's ``URL``
DatabaseUrl = str | URL
#: the world's file beside a SQLite evidence database
WORLD_FILE = "support-desk-world.db"
#: the world's schema in a PostgreSQL evidence database
WORLD_SCHEMA = "support_desk_world"
# serialises concurrent first-time setups of the world's schema on one PostgreSQL database
_PG_SETUP_LOCK = 0x53445750  # "SDWP"

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


def world_url_beside(database_url: DatabaseUrl) -> URL:
    """Where the world lives for the evidence database at ``database_url``: the same
    PostgreSQL database (its own schema), or a file beside the evidence SQLite file."""
    text = (
        database_url.render_as_string(hide_password=False)
        if isinstance(database_url, URL)
        else database_url
    )
    parsed = make_url(normalize_database_url(text))
    if parsed.get_backend_name() == "sqlite":
        return parsed.set(database=str(Path(parsed.database or "").parent / WORLD_FILE), query={})
    return parsed


def _row(row: Any) -> dict[str, Any] | None:
    return dict(row._mapping) if row is not None else None


@dataclass
class SqlWorldCall:
    """One provider call: logged in ``sim_calls`` in the same transaction as what it does
    (implements ``WorldCall``)."""

    conn: AsyncConnection

    async def customer(self, customer_id: str) -> dict[str, Any] | None:
        query = select(customers).where(customers.c.customer_id == customer_id)
        return _row((await self.conn.execute(query)).first())

    async def customers_by_phone(self, phone: str) -> list[dict[str, Any]]:
        query = (
            select(customers).where(customers.c.phone == phone).order_by(customers.c.customer_id)
        )
        return [dict(r._mapping) for r in (await self.conn.execute(query)).all()]

    async def refund_by_key(self, idempotency_key: str) -> dict[str, Any] | None:
        query = select(refunds).where(refunds.c.idempotency_key == idempotency_key)
        return _row((await self.conn.execute(query)).first())

    async def refund_by_request(self, provider_request_id: str) -> dict[str, Any] | None:
        query = select(refunds).where(refunds.c.provider_request_id == provider_request_id)
        return _row((await self.conn.execute(query)).first())

    async def add_refund(self, **values: Any) -> None:
        await self.conn.execute(insert(refunds).values(**values))

    async def email_by_key(self, idempotency_key: str) -> dict[str, Any] | None:
        query = select(emails).where(emails.c.idempotency_key == idempotency_key)
        return _row((await self.conn.execute(query)).first())

    async def email_by_request(self, provider_request_id: str) -> dict[str, Any] | None:
        query = select(emails).where(emails.c.provider_request_id == provider_request_id)
        return _row((await self.conn.execute(query)).first())

    async def add_email(self, **values: Any) -> None:
        await self.conn.execute(insert(emails).values(**values))


class SqlWorldStore:
    """The ``sim_*`` tables on an engine of the world's own (implements ``WorldStore``)."""

    def __init__(self, url: DatabaseUrl) -> None:
        self.url = world_url_beside(url)
        kwargs: dict[str, Any] = {"poolclass": NullPool}
        if self.url.get_backend_name() == "postgresql":
            kwargs["execution_options"] = {"schema_translate_map": {None: WORLD_SCHEMA}}
        self.engine = create_async_engine(self.url, **kwargs)
        if self.url.get_backend_name() == "sqlite":
            install_sqlite_pragmas(self.engine, foreign_keys=False)

    @classmethod
    def beside(cls, database_url: DatabaseUrl) -> SqlWorldStore:
        """The world of the evidence database at ``database_url`` (see the module docstring)."""
        return cls(database_url)

    @property
    def is_postgresql(self) -> bool:
        return self.url.get_backend_name() == "postgresql"

    @contextlib.asynccontextmanager
    async def _begin(self) -> AsyncIterator[AsyncConnection]:
        try:
            async with self.engine.begin() as conn:
                yield conn
        except DBAPIError as exc:
            raise StoreError(f"simulated world: database error: {exc.orig!r}") from exc

    async def ensure(self, seed_customers: Iterable[Mapping[str, Any]]) -> None:
        """Create the world's tables, and the CRM's customers missing from it."""
        if not self.is_postgresql:
            assert self.url.database is not None
            Path(self.url.database).parent.mkdir(parents=True, exist_ok=True)
        async with self._begin() as conn:
            if self.is_postgresql:
                await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_SETUP_LOCK})
                await conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{WORLD_SCHEMA}"'))
            await conn.run_sync(metadata.create_all, checkfirst=True)
            present = set((await conn.execute(select(customers.c.customer_id))).scalars())
            missing = [dict(c) for c in seed_customers if c["customer_id"] not in present]
            if missing:
                await conn.execute(insert(customers), missing)

    @contextlib.asynccontextmanager
    async def call(
        self, provider: str, operation: str, request_key: str | None, at: datetime
    ) -> AsyncIterator[SqlWorldCall]:
        """A transaction for one provider call, logged first."""
        async with self._begin() as conn:
            await conn.execute(
                insert(calls).values(
                    provider=provider, operation=operation, request_key=request_key, at=at
                )
            )
            yield SqlWorldCall(conn)

    async def contents(self) -> dict[str, Any]:
        """``customers``, ``refunds`` and ``emails`` (rows, oldest first) and ``calls``:
        (provider, operation, number of calls) triples."""
        async with self._begin() as conn:
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
        return {
            "customers": [dict(r._mapping) for r in customer_rows],
            "refunds": [dict(r._mapping) for r in refund_rows],
            "emails": [dict(r._mapping) for r in email_rows],
            "calls": [(p, o, int(n)) for p, o, n in counts],
        }

    async def call_count(self, provider: str | None = None, operation: str | None = None) -> int:
        query = select(func.count()).select_from(calls)
        if provider:
            query = query.where(calls.c.provider == provider)
        if operation:
            query = query.where(calls.c.operation == operation)
        async with self._begin() as conn:
            return int((await conn.execute(query)).scalar_one())

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        """A raw transaction on the world (tests that inspect or tamper with its tables)."""
        async with self._begin() as conn:
            yield conn

    read = transaction

    async def dispose(self) -> None:
        await self.engine.dispose()

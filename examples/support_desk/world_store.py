"""The port through which the simulated support-desk world keeps its state (SIMULATION).

The world's state — the CRM's customers, the refunds and emails the providers filed, the log
of every call — is not evidence: it lives in a small store of its own, never in the evidence
database. ``stores/sql/support_desk_world.py`` implements this port (tables ``sim_*``, on an
engine of its own beside the evidence database: ``$REPLAYBOOK_HOME/support-desk-world.db`` for
SQLite, schema ``support_desk_world`` for PostgreSQL); the composition root
(``worker/agents.py: open_world``) hands it to ``SimulatedWorld``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, Protocol

__all__ = ["WorldCall", "WorldStore"]


class WorldCall(Protocol):
    """What one provider call may read and file, in the transaction that logs the call."""

    async def customer(self, customer_id: str) -> dict[str, Any] | None: ...

    async def customers_by_phone(self, phone: str) -> list[dict[str, Any]]: ...

    async def refund_by_key(self, idempotency_key: str) -> dict[str, Any] | None: ...

    async def refund_by_request(self, provider_request_id: str) -> dict[str, Any] | None: ...

    async def add_refund(self, **values: Any) -> None: ...

    async def email_by_key(self, idempotency_key: str) -> dict[str, Any] | None: ...

    async def email_by_request(self, provider_request_id: str) -> dict[str, Any] | None: ...

    async def add_email(self, **values: Any) -> None: ...


class WorldStore(Protocol):
    async def ensure(self, seed_customers: Iterable[Mapping[str, Any]]) -> None:
        """Create the world's tables, and the seed customers missing from it."""
        ...

    def call(
        self, provider: str, operation: str, request_key: str | None, at: datetime
    ) -> AbstractAsyncContextManager[WorldCall]:
        """A transaction for one provider call, logged first (``calls``)."""
        ...

    async def contents(self) -> dict[str, Any]:
        """``customers``, ``refunds`` and ``emails`` (rows, oldest first) and ``calls``:
        (provider, operation, number of calls) triples."""
        ...

    async def call_count(
        self, provider: str | None = None, operation: str | None = None
    ) -> int: ...

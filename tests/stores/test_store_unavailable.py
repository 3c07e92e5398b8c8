"""A PostgreSQL that is shutting down, was shut down by an administrator or cannot take
connections now is a store that is unavailable (``StoreError``: HTTP 503, exit 4), not an
internal error: asyncpg raises these itself, unwrapped by SQLAlchemy, from a connect and from
the raw driver the verification reads with."""

from __future__ import annotations

import asyncpg
import pytest
from asyncpg import exceptions
from sqlalchemy import text

from api.errors import _UNAVAILABLE as API_UNAVAILABLE
from models.errors import StoreError
from stores.sql.database import Database, open_database


@pytest.mark.parametrize(
    "error",
    [
        exceptions.CannotConnectNowError("the database system is shutting down"),
        exceptions.CannotConnectNowError("the database system is starting up"),
        exceptions.AdminShutdownError("terminating connection due to administrator command"),
        exceptions.CrashShutdownError("terminating connection due to crash of another process"),
        exceptions.TooManyConnectionsError("sorry, too many clients already"),
    ],
    ids=["shutting-down", "starting-up", "admin-shutdown", "crash-shutdown", "too-many"],
)
async def test_shutdown_states_are_store_errors(error: Exception, postgres_url: str) -> None:
    db = await open_database(postgres_url, migrate=False)
    try:
        for reading in (db.read, db.snapshot, db.transaction):
            with pytest.raises(StoreError, match="database error"):
                async with reading():
                    raise error
        assert isinstance(error, API_UNAVAILABLE)  # the API's last resort answers 503 too
    finally:
        await db.dispose()


async def test_a_connection_terminated_by_the_server_is_a_store_error(postgres_url: str) -> None:
    """A real administrator shutdown of our own connection (``pg_terminate_backend``), met by
    the raw driver in the middle of a read snapshot."""
    db: Database = await open_database(postgres_url, migrate=False)
    admin = await asyncpg.connect(postgres_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        with pytest.raises(StoreError, match="database error"):
            async with db.snapshot() as conn:
                pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
                assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
                driver = (await conn.get_raw_connection()).driver_connection
                assert driver is not None
                await driver.fetch("SELECT 1")
    finally:
        await admin.close()
        await db.dispose()

"""Database fixtures: every SQL test runs on SQLite and on the real PostgreSQL here.

PostgreSQL is 127.0.0.1:5432 (trust auth); each test session creates its own database there
(named ``rb_test_<hex>``, dropped at the end) so that runs never see each other's rows.
Override the server with ``REPLAYBOOK_TEST_PG_URL``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from stores.sql.database import Database, open_database
from stores.sql.scratch import create_scratch_database, drop_scratch_database

PG_ADMIN_URL = os.environ.get("REPLAYBOOK_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def postgres_url() -> AsyncIterator[str]:
    """A fresh, empty PostgreSQL database for this test session."""
    url = await create_scratch_database(PG_ADMIN_URL, "rb_test")
    yield url
    await drop_scratch_database(PG_ADMIN_URL, url)


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('sqlite') / 'replaybook.db'}"


@pytest_asyncio.fixture(scope="session", loop_scope="session", params=["sqlite", "postgresql"])
async def database(
    request: pytest.FixtureRequest, sqlite_url: str, postgres_url: str
) -> AsyncIterator[Database]:
    """The same tests on both backends (one contract suite, two factories)."""
    url = sqlite_url if request.param == "sqlite" else postgres_url
    db = await open_database(url)
    yield db
    await db.dispose()

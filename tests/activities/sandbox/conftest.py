"""The replay stack on both databases for the sandbox tests: the stores (and so the broker
that serves the sandboxed steps) are the worker's, the child never sees them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from devstack.temporal_server import start_temporal_dev_server
from examples.support_desk.providers import SimulatedWorld
from stores.bundle import open_stores
from stores.sql.support_desk_world import SqlWorldStore
from tests.fixtures_replay import ReplayStack, stack_settings
from worker.temporal import running_workers


@pytest_asyncio.fixture(scope="module", loop_scope="session", params=["sqlite", "postgresql"])
async def sandbox_stack(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    replay_stack: ReplayStack,
    postgres_url: str,
) -> AsyncIterator[ReplayStack]:
    if request.param == "sqlite":
        yield replay_stack
        return
    # PostgreSQL: a Temporal server of its own, so that no worker of the session's SQLite
    # stack (same task queues) can pick these replays up
    home = tmp_path_factory.mktemp("sandbox-pg")
    server = start_temporal_dev_server(home / "temporal", headless=True)
    try:
        settings = stack_settings(home, server.address, database_url=postgres_url)
        client = await Client.connect(server.address, data_converter=pydantic_data_converter)
        async with open_stores(settings.stores) as stores:
            world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
            await world.ensure()
            async with running_workers(settings, "all", client):
                yield ReplayStack(settings, client, stores, world)
    finally:
        server.stop(timeout=20)

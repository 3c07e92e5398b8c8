"""Temporal fixtures: one real dev server (``temporal server start-dev``) per test session.

It runs on free ports with its SQLite database in a temporary directory and is stopped at the
end of the session. No skipping: if it cannot start, every test that needs it errors.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from devstack.temporal_server import TemporalDevServer, start_temporal_dev_server


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalDevServer]:
    server = start_temporal_dev_server(tmp_path_factory.mktemp("temporal"), headless=True)
    try:
        yield server
    finally:
        server.stop(timeout=10)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal_client(temporal_server: TemporalDevServer) -> Client:
    """A client on the session's server, with the pydantic data converter the workflows use."""
    return await Client.connect(
        temporal_server.address,
        namespace=temporal_server.namespace,
        data_converter=pydantic_data_converter,
    )

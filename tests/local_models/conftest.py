"""The local model server, started once per test session (the real ``llama_cpp.server`` with
both local models, as ``replaybook dev up`` runs it), and stores wired to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from devstack.components import dev_dir
from devstack.model_server import launch_model_server
from devstack.ports import free_ports
from devstack.processes import terminate
from examples.support_desk.providers import SimulatedWorld
from stores.bundle import Stores, open_stores
from stores.sql.support_desk_world import SqlWorldStore
from worker.settings import Settings


@pytest.fixture(scope="session")
def local_models_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("model-server")
    dev_dir(home).mkdir(parents=True)
    record = launch_model_server(home, free_ports(1)[0], {"PATH": "/usr/bin:/bin"})
    try:
        yield record["base_url"]
    finally:
        terminate(record["pid"], record["pid_start"], timeout=10)


@dataclass
class ModelStack:
    settings: Settings
    stores: Stores
    world: SimulatedWorld


@pytest_asyncio.fixture(loop_scope="session")
async def model_stack(local_models_url: str, tmp_path: Path) -> AsyncIterator[ModelStack]:
    settings = Settings.from_env(
        {
            "REPLAYBOOK_HOME": str(tmp_path),
            "REPLAYBOOK_LOCAL_MODELS_URL": local_models_url,
            "REPLAYBOOK_LOG_FORMAT": "json",
        }
    )
    async with open_stores(settings.stores) as stores:
        world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
        await world.ensure()
        yield ModelStack(settings, stores, world)

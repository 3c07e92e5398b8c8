"""Stores wired to the session's local model server (``local_models_url``, from
``tests/fixtures_models.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest_asyncio

from examples.support_desk.providers import SimulatedWorld
from stores.bundle import Stores, open_stores
from stores.sql.support_desk_world import SqlWorldStore
from tests.fixtures_models import MODEL_CALL_TIMEOUT
from worker.settings import Settings


@dataclass
class ModelStack:
    settings: Settings
    stores: Stores
    world: SimulatedWorld
    #: things with an ``aclose`` (model providers) closed when the test ends
    closing: list[Any] = field(default_factory=list)


@pytest_asyncio.fixture(loop_scope="session")
async def model_stack(local_models_url: str, tmp_path: Path) -> AsyncIterator[ModelStack]:
    settings = Settings.from_env(
        {
            "REPLAYBOOK_HOME": str(tmp_path),
            "REPLAYBOOK_LOCAL_MODELS_URL": local_models_url,
            "REPLAYBOOK_MODELS_TIMEOUT": str(MODEL_CALL_TIMEOUT),
            "REPLAYBOOK_LOG_FORMAT": "json",
        }
    )
    async with open_stores(settings.stores) as stores:
        world_store = SqlWorldStore.beside(stores.db.engine.url)
        world = SimulatedWorld(world_store)
        stack = ModelStack(settings, stores, world)
        try:
            await world.ensure()
            yield stack
        finally:
            for closable in stack.closing:
                with contextlib.suppress(Exception):
                    await closable.aclose()
            await world_store.dispose()

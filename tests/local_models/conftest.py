"""The local model server, started once per test session (the real ``llama_cpp.server`` with
both local models, as ``replaybook dev up`` runs it), and stores wired to it.

Every wait here has a deadline: the server's start (``START_TIMEOUT``), each model call (the
registry's timeout, ``MODEL_CALL_TIMEOUT`` here: the provider bounds the whole call, not each
read), and the teardown (SIGTERM, then SIGKILL, then the reaping of the process). The server
is killed by the kernel if this test process dies before its teardown runs.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from devstack.components import dev_dir
from devstack.model_server import launch_model_server
from devstack.ports import free_ports
from devstack.processes import pid_alive, terminate
from examples.support_desk.providers import SimulatedWorld
from stores.bundle import Stores, open_stores
from stores.sql.support_desk_world import SqlWorldStore
from worker.settings import Settings

#: seconds a single model call may take in these tests (a short answer takes a few seconds
#: even on two busy cores; a call past this fails the test instead of waiting)
MODEL_CALL_TIMEOUT = 120


def _stop_server(record: dict[str, Any]) -> None:
    """SIGTERM the server's group, SIGKILL after 10 s, and reap it (it is this process's child:
    left unreaped it would stay a zombie until the session ends)."""
    pid = record["pid"]
    try:
        terminate(pid, record["pid_start"], timeout=10)
    finally:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                reaped, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # already reaped (by subprocess's own clean-up)
                break
            if reaped:
                break
            time.sleep(0.05)
        assert not pid_alive(pid, record["pid_start"]), f"the model server {pid} is still running"


@pytest.fixture(scope="session")
def local_models_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("model-server")
    dev_dir(home).mkdir(parents=True)
    record = launch_model_server(
        home, free_ports(1)[0], {"PATH": "/usr/bin:/bin"}, die_with_parent=True
    )
    try:
        yield record["base_url"]
    finally:
        _stop_server(record)


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

"""What the API's handlers share: settings, the stores and a Temporal client, opened on first
use (so a missing Temporal fails only the requests that need it, with 503) and closed when
the application shuts down."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from api.config import ApiConfig
from models.errors import StoreError
from stores.bundle import Stores, open_stores
from worker.settings import Settings

if TYPE_CHECKING:
    from collections.abc import Mapping

    from temporalio.client import Client

    from runtime.replay.catalog import AgentCatalog


class ApiState:
    def __init__(self, settings: Settings, config: ApiConfig) -> None:
        self.settings = settings
        self.config = config
        self._stores: Stores | None = None
        self._client: Client | None = None
        self._catalogs: Mapping[str, AgentCatalog] | None = None
        self._lock = asyncio.Lock()
        self._exit = contextlib.AsyncExitStack()

    async def stores(self) -> Stores:
        if self._stores is None:
            async with self._lock:
                if self._stores is None:
                    opened = open_stores(self.settings.stores)
                    self._stores = await self._exit.enter_async_context(opened)
        return self._stores

    async def client(self) -> Client:
        if self._client is None:
            from worker.temporal import connect

            async with self._lock:
                if self._client is None:
                    try:
                        self._client = await connect(self.settings)
                    except RuntimeError as exc:  # the SDK's "Failed client connect"
                        raise StoreError(
                            f"cannot reach Temporal at {self.settings.temporal.address}: {exc}"
                        ) from exc
        return self._client

    def catalogs(self) -> Mapping[str, AgentCatalog]:
        """The deployment's agents, to check a request before it starts a workflow."""
        if self._catalogs is None:
            from worker.catalogs import deployment_catalogs

            self._catalogs = deployment_catalogs(self.settings)
        return self._catalogs

    async def close(self) -> None:
        await self._exit.aclose()
        self._stores = None


async def get_state(request: Request) -> ApiState:
    # a coroutine, not a function FastAPI would run in its thread pool on every request
    api: ApiState = request.app.state.api
    return api


State = Annotated[ApiState, Depends(get_state)]

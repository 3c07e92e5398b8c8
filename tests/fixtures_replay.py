"""The replay stack for tests: real Temporal dev server, real workers in this process, the
embedded SQLite ledger and a local artifact directory shared with the workers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client

from devstack.temporal_server import TemporalDevServer
from examples.support_desk.providers import SimulatedWorld
from models.queues import CONTROL_QUEUE
from models.replay_flow import ReplayOutcome, ReplayPlan, ReplayWorkflowInput
from stores.bundle import Stores, open_stores
from worker.settings import Settings
from worker.temporal import running_workers
from workflows.replay import ReplayWorkflow


def stack_settings(home: Path, temporal_address: str) -> Settings:
    return Settings(
        home=home,
        database_url=f"sqlite+aiosqlite:///{home / 'replaybook.db'}",
        artifacts=str(home / "artifacts"),
        s3_endpoint_url=None,
        temporal_address=temporal_address,
        temporal_namespace="default",
        log_format="json",
    )


@dataclass
class ReplayStack:
    settings: Settings
    client: Client
    stores: Stores
    world: SimulatedWorld

    async def replay(self, plan: ReplayPlan) -> ReplayOutcome:
        return await self.client.execute_workflow(
            ReplayWorkflow.run,
            ReplayWorkflowInput(plan=plan),
            id=plan.replay_id,
            task_queue=CONTROL_QUEUE,
        )


@pytest.fixture(scope="session")
def replay_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("replay-home")


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def replay_stack(
    temporal_server: TemporalDevServer, temporal_client: Client, replay_home: Path
) -> AsyncIterator[ReplayStack]:
    settings = stack_settings(replay_home, temporal_server.address)
    async with open_stores(settings) as stores:
        world = SimulatedWorld(stores.db)
        await world.ensure()
        async with running_workers(settings, "all", temporal_client):
            yield ReplayStack(settings, temporal_client, stores, world)

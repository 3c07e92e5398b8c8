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
from stores.sql.support_desk_world import SqlWorldStore
from worker.settings import Settings
from worker.temporal import running_workers
from workflows.replay import ReplayWorkflow

#: bytes one replay may write through the sandbox broker in the test stacks
SANDBOX_WRITE_QUOTA = 7 * 1024**2
#: bytes of one message from a sandboxed process in the test stacks
SANDBOX_MESSAGE_QUOTA = 4 * 1024**2


def stack_settings(home: Path, temporal_address: str, database_url: str | None = None) -> Settings:
    """The settings of a stack under ``home`` (SQLite there unless ``database_url``)."""
    return Settings.from_env(
        {
            "REPLAYBOOK_HOME": str(home),
            "REPLAYBOOK_DATABASE_URL": database_url,
            "TEMPORAL_ADDRESS": temporal_address,
            "REPLAYBOOK_LOG_FORMAT": "json",
            # small enough for tests/activities/sandbox to run a replay into it, far above what any
            # legitimate test replay writes
            "REPLAYBOOK_SANDBOX_MAX_WRITE_BYTES": str(SANDBOX_WRITE_QUOTA),
            "REPLAYBOOK_SANDBOX_MAX_MESSAGE_BYTES": str(SANDBOX_MESSAGE_QUOTA),
            # the suite starts dozens of workers: no warm sandbox each (the pool has its own
            # tests, tests/activities/sandbox/test_warm_pool.py)
            "REPLAYBOOK_SANDBOX_WARM": "0",
        }
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
    async with open_stores(settings.stores) as stores:
        world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
        await world.ensure()
        async with running_workers(settings, "all", temporal_client):
            yield ReplayStack(settings, temporal_client, stores, world)

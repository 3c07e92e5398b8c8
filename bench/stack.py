"""The stack a Temporal benchmark runs on, set up in one place: a temporary home, a Temporal dev
server on free ports, the settings of that home (SQLite ledger, local artifacts, JSON logs,
every other setting at its default: the workers' defaults are what the benches measure), the
stores and a client. Workers are started by the bench (``BenchStack.workers``), so a bench
can run several worker configurations on one server.

``async with bench_stack() as stack:`` is what ``bench.bench_replay``, ``bench.replay_scale``,
``bench.long_replay`` and ``bench.capsule`` start on; ``bench_settings`` alone serves the
benches that need no Temporal (``bench.replay_process``).
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from devstack.temporal_server import start_temporal_dev_server
from models.queues import CONTROL_QUEUE
from models.replay_flow import ReplayOutcome, ReplayPlan, ReplayWorkflowInput
from stores.bundle import Stores, open_stores
from worker.settings import Settings
from worker.temporal import connect, running_workers
from workflows.replay import ReplayWorkflow


def bench_settings(
    home: Path, temporal_address: str | None = None, env: Mapping[str, str] | None = None
) -> Settings:
    """The settings of a bench home: its SQLite ledger and artifacts, JSON logs; ``env`` adds
    or overrides variables (nothing else is read from this process's environment, so a
    variable left set in the shell does not change what the bench measures)."""
    values = {
        "REPLAYBOOK_HOME": str(home),
        "REPLAYBOOK_DATABASE_URL": f"sqlite+aiosqlite:///{home / 'rb.db'}",
        "REPLAYBOOK_LOG_FORMAT": "json",
    }
    if temporal_address is not None:
        values["TEMPORAL_ADDRESS"] = temporal_address
    return Settings.from_env({**values, **dict(env or {})})


@dataclass
class BenchStack:
    home: Path
    settings: Settings
    stores: Stores
    client: Client

    def workers(
        self, settings: Settings | None = None, queues: str = "all"
    ) -> AbstractAsyncContextManager[list[Worker]]:
        """Workers in this process (``settings``: another configuration of the same home and
        server), running until the block exits."""
        return running_workers(settings or self.settings, queues, self.client)

    async def replay(self, plan: ReplayPlan) -> ReplayOutcome:
        """``plan`` replayed through Temporal (the replay workflow on the control queue) to its
        end; workers must be running."""
        return await self.client.execute_workflow(
            ReplayWorkflow.run,
            ReplayWorkflowInput(plan=plan),
            id=plan.replay_id,
            task_queue=CONTROL_QUEUE,
        )


@asynccontextmanager
async def bench_stack(env: Mapping[str, str] | None = None) -> AsyncIterator[BenchStack]:
    """A temporary home with a Temporal dev server, its settings (``bench_settings`` with
    ``env``), its stores open and a client, until the block exits (server stopped, home
    deleted)."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        server = start_temporal_dev_server(home / "temporal", headless=True)
        try:
            settings = bench_settings(home, server.address, env)
            async with open_stores(settings.stores) as stores:
                yield BenchStack(home, settings, stores, await connect(settings))
        finally:
            server.stop(timeout=20)

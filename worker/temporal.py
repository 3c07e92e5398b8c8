"""Connecting to Temporal and running Replaybook's workers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import structlog
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import TLSConfig
from temporalio.worker import Worker

from activities.incident import IncidentActivities
from activities.replay import ReplayActivities
from activities.sandbox.setup import sandboxed_steps
from models.errors import ConfigurationError
from models.queues import CONTROL_QUEUE, REPLAY_QUEUE
from runtime.replay.catalog import AgentCatalog
from runtime.replay.engine import ReplayEngine
from stores.bundle import open_stores
from stores.sql.database import Database
from stores.sql.incidents import SqlIncidentStore
from worker.agents import reconcilers_for
from worker.catalogs import catalogs as agent_catalogs
from worker.settings import Settings
from workflows.incident import IncidentWorkflow
from workflows.replay import ReplayWorkflow

log = structlog.get_logger(__name__)
WORKFLOWS = [ReplayWorkflow, IncidentWorkflow]


async def connect(settings: Settings) -> Client:
    """A client whose payloads are pydantic models (the same converter as the workers). Against
    a real cluster only the address, namespace and TLS/API-key settings change."""
    from worker import temporal_state

    temporal_state.client_used = True
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=pydantic_data_converter,
        tls=_tls(settings),
        api_key=settings.temporal_api_key,
    )


def _tls(settings: Settings) -> TLSConfig | bool:
    if not (settings.temporal_tls_cert or settings.temporal_tls_ca or settings.temporal_tls):
        return False

    def read(path: str | None) -> bytes | None:
        if path is None:
            return None
        try:
            return Path(path).read_bytes()
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read Temporal TLS file {path}: {exc.strerror}"
            ) from exc

    return TLSConfig(
        client_cert=read(settings.temporal_tls_cert),
        client_private_key=read(settings.temporal_tls_key),
        server_root_ca_cert=read(settings.temporal_tls_ca),
    )


def catalogs(db: Database) -> Mapping[str, AgentCatalog]:
    """The agents whose code this worker can replay (``worker.catalogs``, which sandboxed
    steps import in their own process)."""
    return agent_catalogs(db)


@contextlib.asynccontextmanager
async def running_workers(
    settings: Settings, queues: str = "all", client: Client | None = None
) -> AsyncIterator[list[Worker]]:
    """Workers for ``control``, ``replay`` or ``all`` queues, running until the block exits."""
    if queues not in ("control", "replay", "all"):
        raise ValueError(f"unknown queue {queues!r} (control, replay or all)")
    client = client or await connect(settings)
    async with open_stores(settings) as stores:
        engine = ReplayEngine(stores.ledger, stores.evidence, stores.artifacts, catalogs(stores.db))
        # a replay worker refuses to start when it cannot sandbox its steps (rule 16)
        steps = sandboxed_steps(engine, settings.sandbox) if queues != "control" else None
        acts = ReplayActivities(engine, steps)
        incident_acts = IncidentActivities(
            stores,
            SqlIncidentStore(stores.db),
            lambda graph_id: reconcilers_for(graph_id, stores.db),
        )
        workers = []
        if queues in ("control", "all"):
            workers.append(
                Worker(
                    client,
                    task_queue=CONTROL_QUEUE,
                    workflows=WORKFLOWS,
                    activities=[
                        acts.prepare_replay,
                        acts.compare_replay,
                        acts.close_replay_run,
                        incident_acts.freeze_incident_evidence,
                        incident_acts.unknown_side_effects,
                        incident_acts.reconcile_side_effect,
                        incident_acts.resolve_side_effect_by_human,
                        incident_acts.sign_failure,
                        incident_acts.save_incident,
                        incident_acts.create_regression_case,
                        incident_acts.build_incident_report,
                    ],
                )
            )
        if queues in ("replay", "all"):
            # the replay pool executes agent steps: it is given no write provider at all
            workers.append(Worker(client, task_queue=REPLAY_QUEUE, activities=[acts.replay_step]))
        tasks = [asyncio.create_task(w.run()) for w in workers]
        log.info("workers started", queues=queues, address=settings.temporal_address)
        try:
            yield workers
        finally:
            for w in workers:
                await w.shutdown()
            await asyncio.gather(*tasks, return_exceptions=True)
            if steps is not None:  # the sandboxed processes kept between a replay's batches
                await steps.aclose()


async def run_workers(settings: Settings, queues: str = "all") -> None:
    """Run until cancelled (SIGINT/SIGTERM)."""
    async with running_workers(settings, queues):
        await asyncio.Event().wait()

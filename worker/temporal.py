"""Connecting to Temporal and running Replaybook's workers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import structlog
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from activities.incident import IncidentActivities
from activities.replay import ReplayActivities
from activities.sandbox.setup import sandboxed_steps
from activities.side_effects import SideEffectRetryActivities
from examples.support_desk.world_store import WorldStore
from integrations.tau_bench.world.live import TauWorlds, tau_counterfactual
from models.errors import StoreError
from models.queues import CONTROL_QUEUE, REPLAY_QUEUE
from runtime.providers.endpoint import ModelEndpointSettings
from runtime.providers.registry import ModelRegistrySettings
from runtime.replay.catalog import AgentCatalog
from runtime.replay.engine import ReplayEngine
from stores.bundle import Stores, open_stores
from stores.sql.side_effect_leases import sweep_expired_side_effects
from worker.agents import open_world, reconcilers_for, tool_providers_for
from worker.catalogs import catalogs as agent_catalogs
from worker.heap import freeze_startup_heap
from worker.settings import Settings
from workflows.incident import IncidentWorkflow
from workflows.replay import ReplayWorkflow
from workflows.side_effect_retry import SideEffectRetryWorkflow

log = structlog.get_logger(__name__)
WORKFLOWS = [ReplayWorkflow, IncidentWorkflow, SideEffectRetryWorkflow]
#: what a sandboxed replay step imports to build the agent catalogs (the child is a process)
CATALOG_FACTORY = "worker.catalogs:catalogs"


async def connect(settings: Settings) -> Client:
    """A client whose payloads are pydantic models (the same converter as the workers). Against
    a real cluster only the Temporal settings change (address, namespace, TLS, API key: see
    ``worker.settings.TemporalSettings``, loaded by ``temporalio.envconfig``)."""
    from worker import temporal_state

    options = settings.temporal.connect_config()  # a TLS file that cannot be read: refused here
    temporal_state.client_used = True
    return await Client.connect(**options, data_converter=pydantic_data_converter)


def catalogs(
    world: WorldStore,
    endpoint: ModelEndpointSettings | None = None,
    registry: ModelRegistrySettings | None = None,
    tau_worlds: TauWorlds | None = None,
) -> Mapping[str, AgentCatalog]:
    """The agents whose code this worker can replay (``worker.catalogs``, which sandboxed
    steps import in their own process); ``world`` serves their live READ providers,
    ``endpoint`` is the configured model endpoint (``Settings.models``), ``registry`` the named
    models (``Settings.model_registry``)."""
    return agent_catalogs(world, endpoint, registry, tau_worlds)


@contextlib.asynccontextmanager
async def running_workers(
    settings: Settings, queues: str = "all", client: Client | None = None
) -> AsyncIterator[list[Worker]]:
    """Workers for ``control``, ``replay`` or ``all`` queues, running until the block exits."""
    if queues not in ("control", "replay", "all"):
        raise ValueError(f"unknown queue {queues!r} (control, replay or all)")
    client = client or await connect(settings)
    world = open_world(settings.stores.database_url)
    async with open_stores(settings.stores) as stores:
        tau_worlds = TauWorlds(
            stores.ledger, stores.artifacts, stores.evidence, settings.tau_bench_data
        )
        engine = ReplayEngine(
            stores.ledger,
            stores.evidence,
            stores.artifacts,
            catalogs(world, settings.models, settings.model_registry, tau_worlds),
        )
        # a replay worker refuses to start when it cannot sandbox its steps (rule 16)
        steps = (
            sandboxed_steps(engine, settings.sandbox, catalog_factory=CATALOG_FACTORY)
            if queues != "control"
            else None
        )
        acts = ReplayActivities(engine, steps, tau_counterfactual(tau_worlds))
        incident_acts = IncidentActivities(
            stores,
            stores.incidents,
            lambda graph_id: reconcilers_for(graph_id, world),
            console_url=settings.api.console_url,
        )
        # the control pool executes retries of writes proved not applied (never the replay pool)
        retry_acts = SideEffectRetryActivities(
            stores, lambda graph_id: tool_providers_for(graph_id, world)
        )
        workers = []
        if queues in ("control", "all"):
            workers.append(
                Worker(
                    client,
                    task_queue=CONTROL_QUEUE,
                    workflows=WORKFLOWS,
                    activities=_control_activities(acts, incident_acts, retry_acts),
                )
            )
        if queues in ("replay", "all"):
            # the replay pool executes agent steps: it is given no write provider at all
            workers.append(
                Worker(
                    client,
                    task_queue=REPLAY_QUEUE,
                    activities=[acts.replay_step, acts.expect_sandboxes],
                )
            )
        tasks = [asyncio.create_task(w.run()) for w in workers]
        if queues in ("control", "all"):  # the control pool sweeps expired side-effect leases
            tasks.append(asyncio.create_task(_sweep_leases(stores)))
        if steps is not None:  # the warm sandbox processes start now, not on a replay's path
            tasks.append(asyncio.create_task(steps.warm_up()))
        log.info("workers started", queues=queues, address=settings.temporal.address)
        try:
            yield workers
        finally:
            for w in workers:
                await w.shutdown()
            for task in tasks[len(workers) :]:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if steps is not None:  # the sandboxed processes kept between a replay's batches
                await steps.aclose()


def _control_activities(
    acts: ReplayActivities,
    incident_acts: IncidentActivities,
    retry_acts: SideEffectRetryActivities,
) -> list[Callable[..., Any]]:
    """What the control pool executes: everything but replay steps."""
    return [
        acts.prepare_replay,
        acts.compare_replay,
        acts.close_replay_run,
        acts.repeat_in_turn,
        incident_acts.freeze_incident_evidence,
        incident_acts.unknown_side_effects,
        incident_acts.reconcile_side_effect,
        incident_acts.resolve_side_effect_by_human,
        incident_acts.sign_failure,
        incident_acts.sign_failure_with_replays,
        incident_acts.rank_fork_points,
        incident_acts.watch_runs,
        incident_acts.save_incident,
        incident_acts.create_regression_case,
        incident_acts.build_incident_report,
        retry_acts.check_side_effect_retry,
        retry_acts.execute_side_effect_retry,
    ]


async def _sweep_leases(stores: Stores) -> None:
    """Every half lease: side effects a dead process left EXECUTING past the lease become
    UNKNOWN (a store that is down is tried again at the next round)."""
    lease = stores.side_effect_lease_seconds
    while True:
        await asyncio.sleep(lease / 2)
        try:
            swept = await sweep_expired_side_effects(stores.ledger, lease)
        except StoreError as exc:
            log.warning("side-effect lease sweep failed", error=str(exc))
            continue
        if swept:
            log.warning("side effects past their lease marked UNKNOWN", count=len(swept))


async def run_workers(settings: Settings, queues: str = "all") -> None:
    """Run until cancelled (SIGINT/SIGTERM)."""
    async with running_workers(settings, queues):
        freeze_startup_heap()  # the workers, their activities and catalogs are built now
        await asyncio.Event().wait()

"""The agents this deployment knows, by graph id: how to build their tool providers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from examples.support_desk.agent import GRAPH_ID as SUPPORT_DESK
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.real_model import SupportDeskJsonModel
from examples.support_desk.reconcilers import support_desk_reconcilers
from examples.support_desk.spec import run_scenario, support_desk_spec
from examples.support_desk.world_store import WorldStore
from forensics.reconcile import SideEffectReconciler
from models.errors import InvalidInputError
from runtime.executor import RunResult
from runtime.ports import ArtifactStore, EventLedger
from runtime.providers.registry import ModelRegistrySettings
from runtime.tools import ToolProvider
from stores.sql.support_desk_world import DatabaseUrl, SqlWorldStore

KNOWN_AGENTS = (SUPPORT_DESK,)


def open_world(database_url: DatabaseUrl) -> WorldStore:
    """The agents' simulated world (the support desk's): a store of its own, kept beside the
    evidence database at ``database_url`` but never in it. It holds no pooled connection."""
    return SqlWorldStore.beside(database_url)


def agent_runners(
    world: WorldStore, registry: ModelRegistrySettings | None = None
) -> dict[str, Callable[..., Awaitable[RunResult]]]:
    """How to record a live run of each agent, by graph id (``app.agents.AgentRunner``);
    ``registry`` (``Settings.model_registry``) serves ``model``, a registered model's name
    (``None``: the scripted stand-in)."""
    simulated = SimulatedWorld(world)

    async def support_desk(
        ledger: EventLedger,
        artifacts: ArtifactStore,
        scenario: str,
        *,
        prompt: str,
        seed: int,
        model: str | None = None,
    ) -> RunResult:
        if model is None:
            return await run_scenario(
                simulated, ledger, artifacts, scenario, prompt_version=prompt, seed=seed
            )
        if registry is None:
            raise InvalidInputError("no model registry is configured", field="model")
        provider = registry.provider(model)
        try:
            return await run_scenario(
                simulated,
                ledger,
                artifacts,
                scenario,
                prompt_version=prompt,
                seed=seed,
                model=SupportDeskJsonModel(model, provider),
                model_name=model,
            )
        finally:
            await provider.aclose()

    return {SUPPORT_DESK: support_desk}


async def tool_providers_for(graph_id: str, world: WorldStore) -> Mapping[str, ToolProvider]:
    """The live tool providers of an agent (used to retry a write proved not applied)."""
    if graph_id == SUPPORT_DESK:
        simulated = SimulatedWorld(world)
        await simulated.ensure()
        return support_desk_spec(simulated).tool_providers
    raise InvalidInputError(
        f"no tool providers are configured for agent {graph_id!r} (known: {', '.join(KNOWN_AGENTS)})"
    )


def reconcilers_for(graph_id: str, world: WorldStore) -> list[SideEffectReconciler]:
    """The read-only reconcilers of an agent's providers; none means a human decides."""
    if graph_id == SUPPORT_DESK:
        return support_desk_reconcilers(SimulatedWorld(world))
    return []

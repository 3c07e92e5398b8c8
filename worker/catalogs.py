"""The agents whose code this deployment can replay, by graph id.

A module of its own (light to import) because every sandboxed replay step imports it in a
fresh process; there it is called with no world (the broker serves what needs one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import structlog

from examples.coding_agent import GRAPH_ID as CODING_AGENT
from examples.coding_agent import coding_catalog
from examples.support_desk.agent import GRAPH_ID as SUPPORT_DESK
from examples.support_desk.catalog import support_desk_catalog
from examples.support_desk.real_model import SupportDeskJsonModel
from examples.synthetic import GRAPH_ID as SYNTHETIC
from examples.synthetic import synthetic_catalog
from integrations.tau_bench.world.live import world_tool_names
from models.errors import ConfigurationError
from models.ingest import TOOL_LOOP_GRAPH_ID
from runtime.replay.catalog import AgentCatalog
from runtime.tool_loop.catalog import tool_loop_catalog

if TYPE_CHECKING:
    from examples.support_desk.world_store import WorldStore
    from integrations.tau_bench.world.live import TauWorlds
    from runtime.providers.endpoint import ModelEndpointSettings
    from runtime.providers.openai_compat import OpenAICompatibleProvider
    from runtime.providers.registry import ModelRegistrySettings
    from worker.settings import Settings

log = structlog.get_logger(__name__)


def registry_providers(
    registry: ModelRegistrySettings | None,
) -> dict[str, OpenAICompatibleProvider]:
    """A provider for each registered model whose configuration is complete (one whose API key
    variable is unset is left out, and logged), also under each of its aliases (the recorded
    model ids it answers for: a replay finds a run's recorded model by that name)."""
    out: dict[str, OpenAICompatibleProvider] = {}
    for name in registry.entries() if registry is not None else {}:
        try:
            out[name] = registry.provider(name)  # type: ignore[union-attr]
        except ConfigurationError as exc:
            log.warning("registered model left out", model=name, reason=str(exc))
    for alias, name in registry.aliases().items() if registry is not None else ():
        if name in out:
            out[alias] = out[name]
    return out


def catalogs(
    world: WorldStore | None,
    endpoint: ModelEndpointSettings | None = None,
    registry: ModelRegistrySettings | None = None,
    tau_worlds: TauWorlds | None = None,
) -> Mapping[str, AgentCatalog]:
    """``world``: the simulated world the support desk's live READ providers use; ``endpoint``:
    the configured model endpoint (``Settings.models``) the tool loop offers; ``registry``: the
    named models (``Settings.model_registry``) the support desk and the tool loop offer. All
    ``None`` in a sandboxed step's process (its models are the broker's). ``tau_worlds``: the
    private worlds answering live reads of imported tau-bench runs (the worker's; the tool
    names are offered everywhere so the sandboxed child asks the broker for them)."""
    providers = registry_providers(registry)
    return {
        SUPPORT_DESK: support_desk_catalog(
            world, {name: SupportDeskJsonModel(name, p) for name, p in providers.items()}
        ),
        SYNTHETIC: synthetic_catalog(),
        CODING_AGENT: coding_catalog(),
        TOOL_LOOP_GRAPH_ID: tool_loop_catalog(
            endpoint,
            providers,
            tau_worlds.read_providers if tau_worlds is not None else None,
            world_tool_names(),
        ),
    }


def deployment_catalogs(settings: Settings) -> Mapping[str, AgentCatalog]:
    """The agents as a face (CLI, API) sees them to check a request before it starts a
    workflow: the worker's models (endpoint and registry), no world (nothing is called)."""
    return catalogs(None, settings.models, settings.model_registry)

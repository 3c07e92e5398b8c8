"""The support desk as replay sees it: every version that counterfactuals may swap in."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from examples.support_desk.agent import (
    CAPABILITIES,
    GRAPH_ID,
    GRAPHS,
    POLICIES,
    PROMPTS,
    WRITE_POLICY,
)
from examples.support_desk.knowledge import KeywordRetriever
from examples.support_desk.model import ScriptedSupportModel
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.spec import MODEL_V1
from examples.support_desk.world_store import WorldStore
from runtime.ports import ModelProvider
from runtime.replay.catalog import AgentCatalog
from runtime.tools import ToolProvider

MODEL_V2 = "support-desk-model@2"


def support_desk_catalog(
    world_store: WorldStore | None, real_models: Mapping[str, ModelProvider] | None = None
) -> AgentCatalog:
    """``world_store`` serves the live READ providers (none in a sandboxed step's process:
    there the broker serves them); ``real_models``: the registry's models by name, each a
    ``SupportDeskJsonModel`` (``support_desk_real_models``)."""

    async def read_providers() -> Mapping[str, ToolProvider]:
        # READ capabilities only: a replay worker is never handed a write provider
        if world_store is None:
            raise RuntimeError("the support desk's world is not open in this process")
        world = SimulatedWorld(world_store)
        await world.ensure()
        return {
            "crm.get_customer": world.crm_get_customer,
            "crm.find_by_phone": world.crm_find_by_phone,
        }

    return AgentCatalog(
        graph_id=GRAPH_ID,
        graphs=GRAPHS,
        prompt_bundles=PROMPTS,
        capabilities=CAPABILITIES,
        policy_sets={POLICIES.version: POLICIES},
        write_policy_id=WRITE_POLICY,
        models={
            MODEL_V1: ScriptedSupportModel(1),
            MODEL_V2: ScriptedSupportModel(2, phone_lookup_rate=0.05),
            **(real_models or {}),
        },
        default_model=MODEL_V1,
        retrievers={KeywordRetriever.version: KeywordRetriever()},
        read_providers=read_providers,
        # the checkout the runs record as their source (see spec.ROOT)
        source_root=Path(__file__).resolve().parents[2],
    )

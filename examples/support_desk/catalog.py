"""The support desk as replay sees it: every version that counterfactuals may swap in."""

from __future__ import annotations

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
from runtime.replay.catalog import AgentCatalog
from stores.sql.database import Database

MODEL_V1 = "support-desk-model@1"
MODEL_V2 = "support-desk-model@2"


def support_desk_catalog(db: Database) -> AgentCatalog:
    async def read_providers():  # type: ignore[no-untyped-def]
        # READ capabilities only: a replay worker is never handed a write provider
        world = SimulatedWorld(db)
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
        },
        default_model=MODEL_V1,
        retrievers={KeywordRetriever.version: KeywordRetriever()},
        read_providers=read_providers,
    )

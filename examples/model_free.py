"""What every model-free example agent (the synthetic chain, the coding agent) shares: no
model, no retriever, an approver that refuses, one allow-all write policy, and an empty prompt
bundle; ``model_free_spec`` records with them, ``model_free_catalog`` replays with them."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from models import ApprovalDecision, PolicyDecision
from models.model_call import ModelRequest, ModelResponse
from runtime.capabilities import CapabilityRegistry
from runtime.graph import GraphDefinition, GraphRegistry
from runtime.knowledge import RetrievedChunk
from runtime.policy import Policy, PolicySet
from runtime.prompts import PromptBundle
from runtime.replay.catalog import AgentCatalog
from runtime.session import AgentSpec
from runtime.tools import ToolProvider

WRITE_POLICY_ID = "allow-all"
PROMPTS = {"v1": PromptBundle("v1", {"noop": "ROLE: none\n"})}
NO_MODEL = "none"


def allow_all_policies(name: str) -> PolicySet:
    return PolicySet(
        f"{name}-policies-1",
        [Policy(WRITE_POLICY_ID, "1", lambda action: (PolicyDecision.ALLOW, [name]))],
    )


class NoModel:
    def __init__(self, profile: str) -> None:
        self.profile = profile

    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise RuntimeError("this example agent makes no model calls")


class NoRetriever:
    version = "none"
    snapshot = "none"

    async def search(self, query: str, k: int) -> list[RetrievedChunk]:
        return []


class NoApprover:
    async def review(
        self, capability_id: str, arguments: Mapping[str, Any]
    ) -> tuple[str, ApprovalDecision, timedelta]:
        return "nobody", ApprovalDecision.DENIED, timedelta(0)


def model_free_spec(
    profile: str,
    graph: GraphDefinition,
    capabilities: CapabilityRegistry,
    policies: PolicySet,
    tool_providers: Mapping[str, ToolProvider],
) -> AgentSpec:
    return AgentSpec(
        graph=graph,
        prompts=PROMPTS["v1"],
        capabilities=capabilities,
        policies=policies,
        write_policy_id=WRITE_POLICY_ID,
        tool_providers=dict(tool_providers),
        model=NoModel(profile),
        model_name=NO_MODEL,
        retriever=NoRetriever(),
        approver=NoApprover(),
    )


def model_free_catalog(
    profile: str,
    graph_id: str,
    graphs: GraphRegistry,
    capabilities: CapabilityRegistry,
    policies: PolicySet,
    read_providers: Mapping[str, Any],
) -> AgentCatalog:
    async def providers() -> Mapping[str, ToolProvider]:
        return dict(read_providers)

    return AgentCatalog(
        graph_id=graph_id,
        graphs=graphs,
        prompt_bundles=PROMPTS,
        capabilities=capabilities,
        policy_sets={policies.version: policies},
        write_policy_id=WRITE_POLICY_ID,
        models={NO_MODEL: NoModel(profile)},
        default_model=NO_MODEL,
        retrievers={},
        read_providers=providers,
    )

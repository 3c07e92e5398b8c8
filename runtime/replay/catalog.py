"""What replay needs to know about an agent build, beyond one recording: every version of its
graph, prompt bundles, policy sets, models and retrievers, so counterfactuals can swap them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from models.errors import InvalidInputError
from runtime.capabilities import CapabilityRegistry
from runtime.graph import GraphRegistry
from runtime.knowledge import Retriever
from runtime.policy import PolicySet
from runtime.ports import ModelProvider
from runtime.prompts import PromptBundle
from runtime.tools import ToolProvider


@dataclass
class AgentCatalog:
    graph_id: str
    graphs: GraphRegistry
    prompt_bundles: Mapping[str, PromptBundle]
    capabilities: CapabilityRegistry
    policy_sets: Mapping[str, PolicySet]
    write_policy_id: str
    #: model name -> provider; the recorded run's model is found by its name
    models: Mapping[str, ModelProvider]
    default_model: str
    retrievers: Mapping[str, Retriever]
    #: READ providers only, for the sandbox-live miss policy
    read_providers: Callable[[], Awaitable[Mapping[str, ToolProvider]]]

    def bundle_by_hash(self, bundle_hash: str | None) -> PromptBundle | None:
        return next(
            (b for b in self.prompt_bundles.values() if b.bundle_hash() == bundle_hash), None
        )

    def bundle(self, version: str) -> PromptBundle:
        try:
            return self.prompt_bundles[version]
        except KeyError:
            raise InvalidInputError(
                f"prompt bundle {version!r} is not known for {self.graph_id} (known: {', '.join(sorted(self.prompt_bundles))})"
            ) from None

    def model(self, name: str) -> ModelProvider:
        try:
            return self.models[name]
        except KeyError:
            raise InvalidInputError(
                f"model {name!r} is not configured for {self.graph_id} (known: {', '.join(sorted(self.models))})"
            ) from None

    def policy_set(self, version: str) -> PolicySet:
        try:
            return self.policy_sets[version]
        except KeyError:
            raise InvalidInputError(
                f"policy version {version!r} is not known for {self.graph_id} (known: {', '.join(sorted(self.policy_sets))})"
            ) from None

    def retriever(self, version: str) -> Retriever:
        try:
            return self.retrievers[version]
        except KeyError:
            raise InvalidInputError(
                f"retriever {version!r} is not known for {self.graph_id} (known: {', '.join(sorted(self.retrievers))})"
            ) from None

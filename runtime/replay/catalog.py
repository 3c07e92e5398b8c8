"""What replay needs to know about an agent build, beyond one recording: every version of its
graph, prompt bundles, policy sets, models and retrievers, so counterfactuals can swap them."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from models.enums import ReplayMode
from models.errors import InvalidInputError
from runtime.capabilities import CapabilityRegistry
from runtime.graph import GraphRegistry
from runtime.knowledge import Retriever
from runtime.policy import PolicySet
from runtime.ports import ModelProvider
from runtime.prompts import PromptBundle
from runtime.providers.capabilities import serial_provider
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
    #: the agent's source checkout, whose manifest a replay compares with the recorded one
    source_root: Path | None = None
    #: tools named by each recorded run (not in ``capabilities``: the generic tool loop) that
    #: ``read_providers`` may answer; the run's own tool catalogue says which of them are READ
    live_read_tools: tuple[str, ...] = ()

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

    def recorded_model(self, recorded: str | None) -> str | None:
        """The configured model a run recorded, by its recorded model id: the catalog name
        whose provider's profile (or whose name) is ``recorded``; None when none is."""
        if recorded is None:
            return None
        for name, provider in self.models.items():
            if recorded in (name, provider.profile):
                return name
        # the same model and parameters served at another address (the local model server
        # gets a new port with each `dev up`): the one registered model whose profile differs
        # only by its endpoint
        same = [
            name
            for name, provider in self.models.items()
            if _without_endpoint(provider.profile) == _without_endpoint(recorded)
        ]
        return same[0] if len(same) == 1 else None

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


def _without_endpoint(profile: str) -> str:
    """An OpenAI-compatible profile (``openai-compatible:MODEL@BASE_URL;…``) without
    ``@BASE_URL``."""
    return re.sub(r"@[^;]*", "", profile) if profile.startswith("openai-compatible:") else profile


def replay_model(
    catalog: AgentCatalog,
    mode: ReplayMode,
    candidate: str | None,
    substitute: str | None,
    recorded: str | None,
) -> str:
    """The catalog name of the model a live replay calls (issue 16): the candidate of a model
    swap; else the model the run recorded (EXACT replays the recording), or the explicit
    ``--substitute-model``. A recorded model this worker does not have is an error naming it:
    never a silent fall-back to the catalog's default. A run that recorded no model (nothing
    to be faithful to) uses the default."""
    if mode is ReplayMode.MODEL_SWAP and candidate:
        catalog.model(candidate)
        return candidate
    if substitute:
        catalog.model(substitute)
        return substitute
    if recorded is None:
        if catalog.default_model not in catalog.models:
            raise InvalidInputError(
                f"run recorded no model profile and {catalog.graph_id} has no default model "
                f"{catalog.default_model!r} configured (configured: "
                f"{', '.join(sorted(catalog.models)) or 'none'}); --substitute-model M replays "
                "with M instead, recorded in the replay's manifest",
                field="substitute_model",
            )
        return catalog.default_model
    name = catalog.recorded_model(recorded)
    if name is None:
        raise InvalidInputError(
            f"the recorded model {recorded!r} is not configured for {catalog.graph_id} "
            f"(configured: {', '.join(sorted(catalog.models)) or 'none'}); --substitute-model M "
            "replays with M instead, recorded in the replay's manifest (or name it once in "
            f'REPLAYBOOK_MODELS: "aliases": ["{recorded}"])',
            field="substitute_model",
        )
    return name


def answers_one_at_a_time(provider: object) -> bool:
    """Whether a model provider's endpoint computes one request at a time (its
    ``one_at_a_time``, set for the embedded stack's local model server), looking through
    wrappers by their ``inner``."""
    serial = serial_provider(provider)
    return serial is not None and bool(serial.one_at_a_time)

"""The tool loop as replay sees it. Unlike an agent built on our runtime, an imported agent's
prompt, tools and policy are not deployed here: they come with each recorded run. So the
catalog accepts the run's pinned prompt bundle hash as it is (the text is the run's recorded
prompt artifact), and its policy set allows every action (the source agent's policy was its
own; replay never executes a write anyway, rule 4)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from models import PolicyDecision
from models.errors import ConfigurationError
from models.ingest import TOOL_LOOP_GRAPH_ID
from runtime.policy import Policy, PolicySet
from runtime.ports import ModelProvider
from runtime.prompts import PromptBundle
from runtime.replay.catalog import AgentCatalog
from runtime.tool_loop.graph import GRAPHS, run_registry
from runtime.tools import ToolProvider

if TYPE_CHECKING:
    from runtime.providers.endpoint import ModelEndpointSettings

#: the policy every replayed write of an imported run is decided by
RECORDED_POLICY_ID = "imported-agent-policy"
#: the model name under which the configured OpenAI-compatible endpoint is offered
ENDPOINT_MODEL = "endpoint"


@dataclass(frozen=True)
class RecordedPromptBundle(PromptBundle):
    """Stands for the bundle a run pinned: its hash is the pinned one."""

    pinned_hash: str | None = None

    def bundle_hash(self) -> str:
        return self.pinned_hash  # type: ignore[return-value]  # None: the run pinned no bundle, as recorded


def _allow(_: Mapping[str, object]) -> tuple[PolicyDecision, list[str]]:
    return PolicyDecision.ALLOW, ["imported run: the source agent's policy is not deployed here"]


class ToolLoopCatalog(AgentCatalog):
    def bundle_by_hash(self, bundle_hash: str | None) -> PromptBundle | None:
        return RecordedPromptBundle("recorded", {}, pinned_hash=bundle_hash)

    def policy_set(self, version: str) -> PolicySet:
        return PolicySet(version or "none", [Policy(RECORDED_POLICY_ID, version or "none", _allow)])


def _configured_models(endpoint: ModelEndpointSettings | None) -> dict[str, ModelProvider]:
    """The OpenAI-compatible endpoint of ``REPLAYBOOK_MODEL_*``, when one is configured."""
    if endpoint is None or not endpoint.configured:
        return {}
    from runtime.providers.openai_compat import OpenAICompatibleProvider

    try:
        provider = OpenAICompatibleProvider.from_settings(endpoint)
    except ConfigurationError:
        return {}
    return {ENDPOINT_MODEL: provider, provider.model: provider}


def tool_loop_catalog(
    endpoint: ModelEndpointSettings | None = None,
    registered: Mapping[str, ModelProvider] | None = None,
    live_reads: Callable[[], Awaitable[Mapping[str, ToolProvider]]] | None = None,
    live_read_tools: tuple[str, ...] = (),
) -> ToolLoopCatalog:
    """``endpoint``: the configured model endpoint (``Settings.models``), offered under
    ``ENDPOINT_MODEL`` and its own name; ``None`` or unconfigured: no model. ``registered``:
    the model registry's providers by name, offered as they are. ``live_reads``: READ
    providers by tool name for the ``sandbox-live`` policy (imported tau-bench runs: the
    world's tools on a private copy, ``TauWorlds.read_providers``)."""

    async def no_live_reads() -> dict[str, ToolProvider]:
        # an imported agent's tools are not deployed here: nothing can be called live
        return {}

    return ToolLoopCatalog(
        graph_id=TOOL_LOOP_GRAPH_ID,
        graphs=GRAPHS,
        prompt_bundles={},
        capabilities=run_registry([]),
        policy_sets={},
        write_policy_id=RECORDED_POLICY_ID,
        models={**_configured_models(endpoint), **(registered or {})},
        default_model=ENDPOINT_MODEL,
        retrievers={},
        read_providers=live_reads or no_live_reads,
        live_read_tools=live_read_tools,
    )

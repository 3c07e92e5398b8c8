"""A synthetic agent of any length (SIMULATION), for long-replay tests and benchmarks.

Graph ``synthetic-chain`` version ``N`` has N steps; step i reads ``counter.read(i)`` (a READ
tool) and adds the value to its state. No model calls, no writes.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from examples.model_free import allow_all_policies, model_free_catalog, model_free_spec
from models import SideEffectClass
from models.capability import Capability
from models.errors import GraphNotFoundError
from runtime.capabilities import CapabilityRegistry
from runtime.environment import AgentEnvironment
from runtime.executor import RunResult
from runtime.graph import GraphDefinition, GraphRegistry, State, Step, StepResult
from runtime.ports import ArtifactStore, EventLedger
from runtime.replay.catalog import AgentCatalog
from runtime.session import AgentSpec, record_run
from runtime.tools import ToolCallContext

GRAPH_ID = "synthetic-chain"
LENGTHS = (10, 200, 1000, 10000, 50000)

CAPABILITIES = CapabilityRegistry(
    "synthetic-1",
    [
        Capability(
            capability_id="counter.read",
            schema_={"type": "object", "required": ["i"], "properties": {"i": {"type": "integer"}}},
            side_effect_class=SideEffectClass.READ,
            sandbox_live_allowed=True,
            stub={"value": 0},
        )
    ],
)
POLICIES = allow_all_policies("synthetic")
#: the model profile the synthetic agent pins (it makes no model calls)
PROFILE = "none:synthetic"


def _step(index: int, total: int) -> Step:
    async def step(env: AgentEnvironment, state: State, agent_input: Any) -> StepResult:
        result = await env.tools.call("counter.read", {"i": index})
        value = result.response.get("value", 0) if isinstance(result.response, dict) else 0
        state = {"count": state.get("count", 0) + value, "last": index}
        following = f"s{index + 1:05d}" if index + 1 < total else None
        return StepResult(state, following, {"count": state["count"], "steps": index + 1})

    return step


def chain(total: int) -> GraphDefinition:
    return GraphDefinition(
        graph_id=GRAPH_ID,
        version=str(total),
        entry="s00000",
        steps={f"s{i:05d}": _step(i, total) for i in range(total)},
        description=f"{total} steps, one READ tool call each",
    )


class _Chains(GraphRegistry):
    """The chains of ``LENGTHS``, each built the first time it is asked for: building all of
    them at import (11,210 steps) cost every sandboxed step process part of its start, an
    incident's 60 child replays 60 times (issue 35 item 4)."""

    def get(self, graph_id: str, version: str) -> GraphDefinition:
        built = (graph_id, version) in self._graphs
        if graph_id == GRAPH_ID and not built and version in {str(n) for n in LENGTHS}:
            self.register(chain(int(version)))
        if (graph_id, version) not in self._graphs:
            known = ", ".join(self.versions(graph_id)) or "none"
            raise GraphNotFoundError(
                f"graph {graph_id}@{version} is not registered (versions: {known})"
            )
        return super().get(graph_id, version)

    def versions(self, graph_id: str) -> list[str]:
        lazy = {str(n) for n in LENGTHS} if graph_id == GRAPH_ID else set()
        return sorted(set(super().versions(graph_id)) | lazy)


GRAPHS = _Chains()


async def counter_read(arguments: dict[str, Any], context: ToolCallContext) -> dict[str, Any]:
    return {"value": arguments["i"] % 7}


def synthetic_spec(total: int) -> AgentSpec:
    spec = model_free_spec(
        PROFILE,
        GRAPHS.get(GRAPH_ID, str(total)),
        CAPABILITIES,
        POLICIES,
        {"counter.read": counter_read},
    )
    # the chain has exactly ``total`` steps, past any default limit for the long bench runs
    return dataclasses.replace(spec, max_steps=max(total, 1))


async def record_synthetic_run(
    ledger: EventLedger, artifacts: ArtifactStore, total: int, run_id: str | None = None
) -> RunResult:
    return await record_run(
        synthetic_spec(total),
        ledger,
        artifacts,
        run_id=run_id or f"run-synthetic-{uuid.uuid4().hex[:10]}",
        agent_input={"steps": total},
        seed=0,
        labels={"agent": GRAPH_ID},
    )


def synthetic_catalog() -> AgentCatalog:
    return model_free_catalog(
        PROFILE, GRAPH_ID, GRAPHS, CAPABILITIES, POLICIES, {"counter.read": counter_read}
    )

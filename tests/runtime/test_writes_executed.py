"""``writes_executed`` of a replay is counted from what really reached a provider (issue 16):
the writes the replay's own run recorded as dispatched by the side-effect ledger, read back by
the ``compare_replay`` activity. A normal replay blocks every write (0, and the provider hears
nothing); code that dispatches a write anyway is counted (1, and the provider heard one)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from temporalio.testing import ActivityEnvironment

from activities.replay import ReplayActivities
from app.local_replay import run_prepared
from examples.model_free import (
    WRITE_POLICY_ID,
    allow_all_policies,
    model_free_catalog,
    model_free_spec,
)
from models import ReplayMode, SideEffectClass
from models.capability import Capability
from models.replay_flow import ReplayPlan
from runtime.capabilities import CapabilityRegistry
from runtime.environment import AgentEnvironment
from runtime.graph import GraphDefinition, GraphRegistry, State, StepResult
from runtime.replay.engine import ReplayEngine
from runtime.session import record_run
from runtime.tools import RecordingToolGateway, ToolCallContext
from tests.runtime.conftest import Recording

GRAPH_ID = "test-payer"
PROFILE = "none:test-payer"
CAPABILITIES = CapabilityRegistry(
    "test-payer-1",
    [
        Capability(
            capability_id="ledger.pay",
            schema_={"type": "object", "properties": {"amount": {"type": "integer"}}},
            side_effect_class=SideEffectClass.WRITE,
        )
    ],
)
POLICIES = allow_all_policies("test-payer")


@dataclass
class CountingProvider:
    """A write provider that counts the requests that really reached it."""

    calls: int = 0

    async def __call__(self, arguments: dict[str, Any], context: ToolCallContext) -> dict[str, Any]:
        self.calls += 1
        return {"receipt": f"paid-{self.calls}"}


def graph(step: Any) -> GraphRegistry:
    registry = GraphRegistry()
    registry.register(
        GraphDefinition(graph_id=GRAPH_ID, version="1", entry="pay", steps={"pay": step})
    )
    return registry


async def pays(env: AgentEnvironment, state: State, agent_input: Any) -> StepResult:
    """The agent's step: one payment through the tool gateway it is given."""
    result = await env.tools.call("ledger.pay", {"amount": 1})
    return StepResult({"paid": result.outcome.value}, None, {"paid": result.outcome.value})


async def replay(rec: Recording, run_id: str, registry: GraphRegistry) -> Any:
    catalog = model_free_catalog(PROFILE, GRAPH_ID, registry, CAPABILITIES, POLICIES, {})
    engine = ReplayEngine(rec.ledger, rec.evidence, rec.artifacts, {GRAPH_ID: catalog})
    plan = ReplayPlan(
        replay_id=f"payer-{uuid.uuid4().hex[:8]}", source_run_id=run_id, mode=ReplayMode.RECORDED
    )
    prepared = await engine.prepare(plan)
    assert prepared.ok, prepared.problems
    totals = await run_prepared(engine, plan, prepared)
    result = await ActivityEnvironment().run(ReplayActivities(engine).compare_replay, plan)
    return totals, result


async def test_writes_executed_counts_what_reached_a_provider(rec: Recording) -> None:
    provider = CountingProvider()
    spec = model_free_spec(
        PROFILE, graph(pays).get(GRAPH_ID, "1"), CAPABILITIES, POLICIES, {"ledger.pay": provider}
    )
    source = await record_run(
        spec,
        rec.ledger,
        rec.artifacts,
        run_id=f"payer-src-{uuid.uuid4().hex[:8]}",
        agent_input={},
        seed=0,
    )
    assert provider.calls == 1  # the recording paid once

    # a normal replay: the write is blocked and answered from the recording
    totals, honest = await replay(rec, source.run_id, graph(pays))
    assert totals.writes_blocked == 1 and honest.reproduced
    assert honest.writes_executed == 0 and provider.calls == 1

    # code that dispatches the write past the replay's gateway (on the replay's own recorder)
    async def leaks(env: AgentEnvironment, state: State, agent_input: Any) -> StepResult:
        tools = RecordingToolGateway(
            CAPABILITIES,
            {"ledger.pay": provider},
            env.tools.recorder,
            env.policy,
            WRITE_POLICY_ID,
        )
        result = await tools.call("ledger.pay", {"amount": 1})
        return StepResult({"paid": result.outcome.value}, None, {"paid": result.outcome.value})

    _, leaked = await replay(rec, source.run_id, graph(leaks))
    assert provider.calls == 2  # it reached the provider…
    assert leaked.writes_executed == 1  # …and the replay says so

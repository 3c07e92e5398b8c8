"""Driving a replay in this process through the real ``ReplayEngine`` (the same prepare →
steps → compare the ``Replay`` workflow runs as activities), for replaying every imported run
where going through Temporal for all of them would only measure Temporal."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from models import ReplayMode
from models.budget import BudgetUsage
from models.comparison import compare_trajectories, reproduces
from models.ingest import TOOL_LOOP_GRAPH_ID
from models.replay import ReplayComparison
from models.replay_flow import PreparedReplay, ReplayPlan, StepInput
from runtime.providers.endpoint import ModelEndpointSettings
from runtime.replay.engine import ReplayEngine
from runtime.tool_loop.catalog import tool_loop_catalog
from runtime.trajectory import load_trajectory
from stores.bundle import Stores


@dataclass
class LocalReplay:
    prepared: PreparedReplay
    comparison: ReplayComparison | None
    reproduced: bool
    writes_blocked: int
    fixture_misses: int
    model_calls: int
    stopped: str | None
    replay_id: str


def engine_for(stores: Stores, endpoint: ModelEndpointSettings | None = None) -> ReplayEngine:
    """An engine for imported runs; ``endpoint`` (``Settings.models``) serves model calls of
    ``exact``/``model-swap`` replays."""
    catalog = tool_loop_catalog(endpoint)
    return ReplayEngine(
        stores.ledger, stores.evidence, stores.artifacts, {TOOL_LOOP_GRAPH_ID: catalog}
    )


@dataclass
class StepTotals:
    steps: int = 0
    writes_blocked: int = 0
    fixture_misses: int = 0
    model_calls: int = 0
    stopped: str | None = None
    #: the budget drawn so far (model calls, tokens, cost), carried from batch to batch as the
    #: workflow carries it, so a budget bounds the whole replay
    usage: BudgetUsage = field(default_factory=BudgetUsage)

    @property
    def tokens(self) -> int:
        return self.usage.tokens


async def run_prepared(
    engine: ReplayEngine, plan: ReplayPlan, prepared: PreparedReplay
) -> StepTotals:
    """Run the steps of a prepared replay one batch after another, as the workflow does."""
    step, state_ref, cursors, head = (
        prepared.start_step,
        prepared.state_ref,
        prepared.cursors,
        prepared.head,
    )
    totals = StepTotals()
    while step is not None:
        out = await engine.run_steps(
            StepInput(
                plan=plan,
                step_id=step,
                state_ref=state_ref,
                cursors=cursors,
                head=head,
                step_index=totals.steps,
                usage=totals.usage,
            )
        )
        totals.steps += out.steps
        totals.writes_blocked += out.writes_blocked
        totals.fixture_misses += out.fixture_misses
        totals.model_calls += out.usage.model_calls
        totals.usage = totals.usage.plus(out.usage)
        totals.stopped = out.stopped or totals.stopped
        if out.finished:
            break
        step, state_ref, cursors, head = out.next_step, out.state_ref, out.cursors, out.head
    return totals


async def replay_locally(
    engine: ReplayEngine, run_id: str, mode: ReplayMode = ReplayMode.RECORDED
) -> LocalReplay:
    plan = ReplayPlan(replay_id=f"local-{uuid.uuid4().hex[:12]}", source_run_id=run_id, mode=mode)
    prepared = await engine.prepare(plan)
    if not prepared.ok:
        return LocalReplay(
            prepared, None, False, 0, 0, 0, "; ".join(prepared.problems), plan.replay_id
        )
    totals = await run_prepared(engine, plan, prepared)
    source = await load_trajectory(engine.ledger, run_id)
    replay = await load_trajectory(engine.ledger, plan.replay_id)
    comparison = compare_trajectories(source, replay)
    return LocalReplay(
        prepared,
        comparison,
        reproduces(comparison),
        totals.writes_blocked,
        totals.fixture_misses,
        totals.model_calls,
        totals.stopped,
        plan.replay_id,
    )

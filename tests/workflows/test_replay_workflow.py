"""ReplayWorkflow on a real Temporal dev server with real workers."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from sqlalchemy import update
from temporalio.client import WorkflowExecutionStatus

from examples.support_desk.spec import run_scenario
from examples.synthetic import record_synthetic_run
from models import ExecutionEventType, FixtureMissPolicy, ReplayBudget, ReplayMode, ReplayStatus
from models.replay_flow import ReplayPlan
from stores.sql import schema

WRITES = ("payments", "email")


def plan(run_id: str, mode: ReplayMode = ReplayMode.RECORDED, **kw) -> ReplayPlan:
    return ReplayPlan(
        replay_id=f"replay-{uuid.uuid4().hex[:12]}", source_run_id=run_id, mode=mode, **kw
    )


async def write_calls(stack) -> int:
    return sum([await stack.world.call_count(p) for p in WRITES])


#: seeds of each scenario replayed at once (10: 30 concurrent replays, each starting its own
#: sandbox process, about a second of CPU each in this suite)
REFERENCE_SEEDS = 10


async def test_recorded_replay_reproduces_every_reference_run(replay_stack) -> None:
    stack = replay_stack
    runs = []
    for scenario in ("happy", "wrong-customer", "refund-timeout"):
        for seed in range(REFERENCE_SEEDS):
            result = await run_scenario(
                stack.world, stack.stores.ledger, stack.stores.artifacts, scenario, seed=seed
            )
            runs.append(result.run_id)
    before = await write_calls(stack)
    outcomes = await asyncio.gather(*(stack.replay(plan(r)) for r in runs))
    assert len(outcomes) == 3 * REFERENCE_SEEDS
    for outcome in outcomes:
        assert outcome.status is ReplayStatus.COMPLETED, outcome.reason
        comparison = outcome.comparison
        assert (
            comparison.same_outcome
            and comparison.same_tool_sequence
            and comparison.same_side_effects
        )
        assert (
            outcome.reproduced
            and outcome.writes_executed == 0
            and outcome.budget_used.model_calls == 0
        )
        assert outcome.confidence.value == "FULL" and outcome.completeness == "6/6"
    assert sum(o.writes_blocked for o in outcomes) == REFERENCE_SEEDS * (2 + 1 + 1)
    assert await write_calls(stack) == before  # no write reached a provider


async def _wrong_customer_run(stack) -> str:
    for seed in range(50):
        result = await run_scenario(
            stack.world, stack.stores.ledger, stack.stores.artifacts, "wrong-customer", seed=seed
        )
        if result.outcome["emailed"] == "bob@example.com":
            return result.run_id
    raise AssertionError("no wrong-customer run emailed the wrong customer")


async def test_prompt_v18_counterfactual_does_not_reproduce_and_exact_replays_the_recording(
    replay_stack,
) -> None:
    stack = replay_stack
    run_id = await _wrong_customer_run(stack)
    before = await write_calls(stack)
    swap = await stack.replay(
        plan(
            run_id,
            ReplayMode.PROMPT_SWAP,
            prompt_version="v18",
            miss_policy=FixtureMissPolicy.SANDBOX_LIVE,
            repeat=50,
        )
    )
    assert swap.summary["reproduced"] == 0 and swap.summary["runs"] == 50
    assert swap.summary["ci95"][0] == 0.0 and swap.summary["ci95"][1] < 0.08
    types = {d.type.value for d in swap.comparison.diffs}
    assert "SIDE_EFFECT_CHANGED" in types and swap.comparison.critical
    assert swap.comparison.first_divergent_step == "planner"
    assert len(swap.children) == 50

    exact = await stack.replay(plan(run_id, ReplayMode.EXACT, repeat=10, sampling_seed=7))
    # EXACT replays the recording: the recorded model with the recorded seed (issue 16)
    assert exact.summary["reproduced"] == 10 and exact.summary["rate"] == 1.0
    source = await stack.stores.ledger.get_run(run_id)
    assert exact.manifest.recorded_model_profile == source.pinned.model_profile
    assert exact.manifest.model_profile == source.pinned.model_profile
    assert exact.manifest.substituted_model is None
    assert await write_calls(stack) == before


async def test_a_prompt_swap_stopped_by_fixture_misses_is_inconclusive_not_fixed(
    replay_stack,
) -> None:
    stack = replay_stack
    run_id = await _wrong_customer_run(stack)
    failing = await stack.replay(
        plan(run_id, ReplayMode.PROMPT_SWAP, prompt_version="v18", repeat=5)
    )
    summary = failing.summary
    assert summary["inconclusive"] == 5 and summary["rate"] is None and summary["ci95"] is None
    assert summary["inconclusive_reasons"] == {"FIXTURE_MISS": 5}
    assert failing.confidence.value == "LIMITED"
    for child in failing.child_results:
        assert child.verdict.value == "INCONCLUSIVE"
        assert child.inconclusive_reason.value == "FIXTURE_MISS"
        assert "fixture miss at step" in child.verdict_reason and "for capability" in (
            child.verdict_reason
        )
    live = await stack.replay(
        plan(
            run_id,
            ReplayMode.PROMPT_SWAP,
            prompt_version="v18",
            repeat=5,
            miss_policy=FixtureMissPolicy.SANDBOX_LIVE,
        )
    )
    assert live.summary["not_reproduced"] >= 4 and live.summary["inconclusive"] == 0


async def test_fork_regenerates_the_named_step_and_the_steps_after_it(replay_stack) -> None:
    stack = replay_stack
    source = await record_synthetic_run(stack.stores.ledger, stack.stores.artifacts, 200)
    forked = await stack.replay(plan(source.run_id, ReplayMode.FORK_FROM_STEP, from_step="s00180"))
    assert forked.status is ReplayStatus.COMPLETED and forked.steps_executed == 20
    events = await stack.stores.ledger.events(forked.replay_id)
    started = [e.step_id for e in events if e.type is ExecutionEventType.STEP_STARTED]
    assert started == [f"s{i:05d}" for i in range(180, 200)]
    assert forked.comparison.same_outcome and forked.reproduced


async def test_a_replay_of_an_edited_chain_fails_in_preparing(replay_stack) -> None:
    stack = replay_stack
    result = await run_scenario(
        stack.world, stack.stores.ledger, stack.stores.artifacts, "happy", seed=3
    )
    ev = schema.execution_events
    async with stack.stores.db.transaction() as conn:
        await conn.execute(
            update(ev)
            .where(ev.c.run_id == result.run_id, ev.c.sequence == 4)
            .values(step_id="tampered")
        )
    outcome = await stack.replay(plan(result.run_id))
    assert outcome.status is ReplayStatus.FAILED
    assert "broken at sequence 4" in outcome.reason


async def test_budget_ends_a_replay_with_a_partial_result(replay_stack) -> None:
    stack = replay_stack
    run_id = await _wrong_customer_run(stack)
    outcome = await stack.replay(
        plan(run_id, ReplayMode.EXACT, budget=ReplayBudget(max_model_calls=1))
    )
    assert outcome.status is ReplayStatus.COMPLETED and outcome.partial
    assert "max_model_calls 1" in outcome.reason
    assert outcome.budget_used.model_calls == 1
    assert not outcome.comparison.same_outcome
    assert outcome.verdict.value == "INCONCLUSIVE" and outcome.inconclusive_reason.value == "BUDGET"
    assert outcome.reproduced is None


async def test_repeats_share_one_budget(replay_stack) -> None:
    stack = replay_stack
    run_id = await _wrong_customer_run(stack)
    outcome = await stack.replay(
        plan(run_id, ReplayMode.EXACT, repeat=5, budget=ReplayBudget(max_model_calls=3))
    )
    children = outcome.child_results
    assert len(children) == 5
    assert sum(c.budget_used.model_calls for c in children) <= 3
    assert outcome.budget_used.model_calls <= 3 and outcome.budget_used.duration_seconds > 0
    # the first child runs alone with all 3 calls (it uses 2, or 1 when its lookup misses
    # a fixture); what is left cannot carry the other four to their end
    assert outcome.summary["inconclusive_reasons"].get("BUDGET", 0) >= 3


async def test_cancel_ends_in_canceled(replay_stack) -> None:
    stack = replay_stack
    # 1,000 steps: the cancel must land while steps still run (with 200, a loaded machine's
    # first status answer came after the last batch, and the run had ended completed)
    source = await record_synthetic_run(stack.stores.ledger, stack.stores.artifacts, 1000)
    p = plan(source.run_id)
    from models.queues import CONTROL_QUEUE
    from models.replay_flow import ReplayProgress, ReplayWorkflowInput
    from workflows.replay import ReplayWorkflow

    handle = await stack.client.start_workflow(
        ReplayWorkflow.run, ReplayWorkflowInput(plan=p), id=p.replay_id, task_queue=CONTROL_QUEUE
    )
    # wait until it is running steps, then cancel
    for _ in range(200):
        progress = await handle.query("status", result_type=ReplayProgress)
        if progress.steps_executed >= 1:
            break
        await asyncio.sleep(0.05)
    await handle.cancel()
    for _ in range(400):
        description = await handle.describe()
        if description.status != WorkflowExecutionStatus.RUNNING:
            break
        await asyncio.sleep(0.05)
    assert description.status == WorkflowExecutionStatus.CANCELED
    attrs = description.typed_search_attributes
    assert any(pair.key.name == "ReplayStatus" and pair.value == "CANCELED" for pair in attrs)
    run = await stack.stores.ledger.get_run(p.replay_id)
    assert json.dumps(run.outcome) == '{"ended": "canceled"}'


async def test_model_swap_and_denied_approval_counterfactuals(replay_stack) -> None:
    stack = replay_stack
    happy = await run_scenario(
        stack.world, stack.stores.ledger, stack.stores.artifacts, "happy", seed=2
    )
    before = await write_calls(stack)
    denied = await stack.replay(
        plan(happy.run_id, ReplayMode.EXACT, deny_approvals=("payment.refund",))
    )
    assert denied.status is ReplayStatus.COMPLETED and denied.partial
    assert "ApprovalDeniedError" in denied.reason
    assert {d.type.value for d in denied.comparison.diffs} >= {
        "SIDE_EFFECT_REMOVED",
        "APPROVAL_CHANGED",
    }
    # a refused action is the agent's behaviour, not a truncated replay: conclusive
    assert not denied.reproduced and denied.verdict.value == "NOT_REPRODUCED"

    run_id = await _wrong_customer_run(stack)
    before = await write_calls(stack)  # recording that run sent a real (simulated) email
    swapped = await stack.replay(
        plan(
            run_id,
            ReplayMode.MODEL_SWAP,
            model_name="support-desk-model@2",
            miss_policy=FixtureMissPolicy.SANDBOX_LIVE,
            repeat=10,
        )
    )
    # the candidate model rarely looks up by phone: the wrong email mostly disappears
    assert swapped.summary["reproduced"] <= 3
    events = await stack.stores.ledger.events(swapped.children[0])
    started = json.loads(await stack.stores.ledger.payload(events[0]))
    assert started["manifest"]["model_profile"].startswith("scripted:support-desk-model@2")
    assert await write_calls(stack) == before


async def test_long_replays_continue_as_new(replay_stack) -> None:
    from models.queues import CONTROL_QUEUE
    from models.replay_flow import ReplayOutcome, ReplayWorkflowInput
    from workflows.replay import ReplayWorkflow

    stack = replay_stack
    source = await record_synthetic_run(stack.stores.ledger, stack.stores.artifacts, 200)
    p = plan(source.run_id, steps_per_activity=10, steps_per_run=50)
    handle = await stack.client.start_workflow(
        ReplayWorkflow.run, ReplayWorkflowInput(plan=p), id=p.replay_id, task_queue=CONTROL_QUEUE
    )
    first_run = handle.first_execution_run_id or handle.result_run_id
    outcome: ReplayOutcome = await handle.result()
    assert outcome.steps_executed == 200 and outcome.reproduced and outcome.writes_executed == 0
    latest = await stack.client.get_workflow_handle(p.replay_id).describe()
    assert latest.run_id != first_run  # the replay went on in a new run of the same workflow id
    history = await stack.client.get_workflow_handle(p.replay_id, run_id=first_run).fetch_history()
    assert len(history.events) < 200  # each run's history stays small
    await assert_each_step_once_here(stack, p.replay_id)


async def test_replays_continue_as_new_after_their_activities(replay_stack) -> None:
    """One step per activity (as under a duration budget): the run's history is bounded by the
    activities it holds, whatever ``steps_per_run`` says."""
    from models.queues import CONTROL_QUEUE
    from models.replay_flow import ReplayOutcome, ReplayWorkflowInput
    from workflows.replay import ReplayWorkflow

    stack = replay_stack
    source = await record_synthetic_run(stack.stores.ledger, stack.stores.artifacts, 10)
    p = plan(source.run_id, steps_per_activity=1, activities_per_run=4)
    handle = await stack.client.start_workflow(
        ReplayWorkflow.run, ReplayWorkflowInput(plan=p), id=p.replay_id, task_queue=CONTROL_QUEUE
    )
    outcome: ReplayOutcome = await handle.result()
    assert outcome.steps_executed == 10 and outcome.reproduced
    # the visibility store may list the closed runs a moment after the close: poll for them
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        runs = [r async for r in stack.client.list_workflows(f'WorkflowId="{p.replay_id}"')]
        if len(runs) >= 3 or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.2)
    assert len(runs) == 3  # 4 + 4 + 2 step activities


async def assert_each_step_once_here(stack, replay_id: str) -> None:
    events = await stack.stores.ledger.events(replay_id)
    started = [e.step_id for e in events if e.type is ExecutionEventType.STEP_STARTED]
    assert started == [f"s{i:05d}" for i in range(200)]


async def test_fixture_miss_policies(replay_stack) -> None:
    stack = replay_stack
    run_id = await _wrong_customer_run(stack)
    swap: dict[str, Any] = dict(mode=ReplayMode.PROMPT_SWAP, prompt_version="v18")
    failed = await stack.replay(plan(run_id, **swap))
    assert failed.partial and "FixtureMissError" in failed.reason and failed.fixture_misses == 1
    assert "crm.get_customer" in failed.reason
    stubbed = await stack.replay(plan(run_id, miss_policy=FixtureMissPolicy.STUB, **swap))
    # the CRM capability declares no stub: the agent gets nothing back and finds no customer
    assert stubbed.fixture_misses == 1 and stubbed.status is ReplayStatus.COMPLETED
    assert stubbed.comparison.same_outcome is False

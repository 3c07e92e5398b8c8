"""The ``--repeat`` children of a replay whose live model computes one request at a time (the
embedded stack's ``llama_cpp.server``: registry ``one_at_a_time``) run one after the other, so
that no child's model call waits in the server's queue against its own timeout; with any other
model they run at once. Read from the parent workflow's history (the order in which it started
and saw its children complete), never from the clock.

A Temporal server of its own: its worker's registry names the scripted chat server's models,
and no worker of the session's stacks (same task queues) may pick these replays up."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from devstack.temporal_server import start_temporal_dev_server
from models import FixtureMissPolicy, ReplayMode, ReplayStatus
from models.enums import ReplayVerdict
from models.queues import CONTROL_QUEUE
from models.replay_flow import ReplayOutcome, ReplayPlan, ReplayWorkflowInput
from stores.bundle import Stores, open_stores
from tests.fixtures_tau import import_shortest_airline_run
from tests.runtime.chat_server import ChatServer, text_answer
from worker.settings import Settings
from worker.temporal import running_workers
from workflows.replay import ReplayWorkflow

REPEAT = 3


@dataclass
class Stack:
    client: Client
    stores: Stores
    server: ChatServer
    run_id: str


@pytest.fixture(scope="module")
def chat_server() -> Iterator[ChatServer]:
    with ChatServer() as server:
        yield server


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def stack(
    tmp_path_factory: pytest.TempPathFactory, chat_server: ChatServer
) -> AsyncIterator[Stack]:
    home = tmp_path_factory.mktemp("repeat-in-turn")
    temporal = start_temporal_dev_server(home / "temporal", headless=True)
    endpoint = {"base_url": chat_server.base_url, "model_id": "m", "tool_calling": "prompt"}
    try:
        settings = Settings.from_env(
            {
                "REPLAYBOOK_HOME": str(home),
                "TEMPORAL_ADDRESS": temporal.address,
                "REPLAYBOOK_LOG_FORMAT": "json",
                # the order of the children is what is tested, not the steps' isolation
                "REPLAYBOOK_SANDBOX": "off",
                "REPLAYBOOK_MODELS": json.dumps(
                    {
                        "in-turn": {**endpoint, "one_at_a_time": True},
                        "at-once": endpoint,
                    }
                ),
            }
        )
        client = await Client.connect(temporal.address, data_converter=pydantic_data_converter)
        async with open_stores(settings.stores) as stores:
            run_id = await import_shortest_airline_run(stores, home)
            async with running_workers(settings, "all", client):
                yield Stack(client, stores, chat_server, run_id)
    finally:
        temporal.stop(timeout=20)


async def _repeat(
    stack: Stack, model: str, answer: str = '{"content": "Done."}'
) -> tuple[ReplayOutcome, list[str]]:
    """A model-swap ``--repeat`` of the imported run to ``model`` (one model call per child,
    each answered ``answer``); its outcome and the parent's child events in history order
    (``start``/``done`` + id)."""
    stack.server.script(*(text_answer(answer) for _ in range(REPEAT)))
    plan = ReplayPlan(
        replay_id=f"replay-{model}-{uuid.uuid4().hex[:8]}",
        source_run_id=stack.run_id,
        mode=ReplayMode.MODEL_SWAP,
        model_name=model,
        miss_policy=FixtureMissPolicy.SANDBOX_LIVE,
        repeat=REPEAT,
        max_loop_calls=1,
    )
    outcome: ReplayOutcome = await stack.client.execute_workflow(
        ReplayWorkflow.run,
        ReplayWorkflowInput(plan=plan),
        id=plan.replay_id,
        task_queue=CONTROL_QUEUE,
    )
    history = await stack.client.get_workflow_handle(plan.replay_id).fetch_history()
    order: list[str] = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            started = event.start_child_workflow_execution_initiated_event_attributes
            order.append(f"start {started.workflow_id}")
        elif event.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:
            done = event.child_workflow_execution_completed_event_attributes
            order.append(f"done {done.workflow_execution.workflow_id}")
    return outcome, order


def _scored(outcome: ReplayOutcome) -> None:
    assert outcome.status is ReplayStatus.COMPLETED
    assert len(outcome.child_results) == REPEAT
    for child in outcome.child_results:
        assert child.status is ReplayStatus.COMPLETED
        # judged by the benchmark; a child cut by Replaybook's cap is not scored (issue 30)
        cut = child.verdict is ReplayVerdict.INCONCLUSIVE
        assert child.counterfactual_reward in ((None,) if cut else (0, 1))
        assert child.counterfactual_reason
        assert child.budget_used.model_calls == 1


async def test_children_calling_a_one_at_a_time_model_run_in_turn(stack: Stack) -> None:
    outcome, order = await _repeat(stack, "in-turn")
    _scored(outcome)
    children = [f"{outcome.replay_id}-{i:03d}" for i in range(REPEAT)]
    # each child starts only once the one before it has completed
    assert order == [event for c in children for event in (f"start {c}", f"done {c}")]


async def test_children_calling_another_model_run_at_once(stack: Stack) -> None:
    outcome, order = await _repeat(stack, "at-once")
    _scored(outcome)
    children = [f"{outcome.replay_id}-{i:03d}" for i in range(REPEAT)]
    # all started before the first completed
    assert order[:REPEAT] == [f"start {c}" for c in children]
    assert sorted(order[REPEAT:]) == sorted(f"done {c}" for c in children)


async def test_children_cut_by_replaybooks_cap_are_not_scored(stack: Stack) -> None:
    """Each child asks for a tool and would call the model again: Replaybook's own cap (1 call)
    stops it before the episode's end. That truncation is no benchmark result: INCONCLUSIVE,
    no reward, left out of ``counterfactual_scored`` (issue 30)."""
    read = {"tool_call": {"name": "get_user_details", "arguments": {"user_id": "anya_garcia_5901"}}}
    outcome, _ = await _repeat(stack, "at-once", json.dumps(read))
    assert len(outcome.child_results) == REPEAT
    for child in outcome.child_results:
        assert child.verdict is ReplayVerdict.INCONCLUSIVE, child
        assert child.counterfactual_reward is None
        assert child.counterfactual_reason and "not scored" in child.counterfactual_reason
    assert outcome.summary is not None
    assert outcome.summary["counterfactual_scored"] == 0
    assert outcome.summary["counterfactual_unscored"] == REPEAT
    assert outcome.summary["inconclusive"] == REPEAT

"""A ``--repeat`` parent announces its children to the replay workers' sandbox pools (this
batch and the next) before starting them: an ``expect_sandboxes`` activity on the replay
queue, behind the ``fanout-warm-sandboxes`` patch."""

from __future__ import annotations

import uuid

from temporalio.api.enums.v1 import EventType

from examples.synthetic import record_synthetic_run
from models import ReplayMode, ReplayStatus
from models.queues import REPLAY_QUEUE
from models.replay_flow import ReplayPlan


async def test_a_repeat_parent_announces_its_children_before_starting_them(replay_stack) -> None:
    stack = replay_stack
    source = await record_synthetic_run(stack.stores.ledger, stack.stores.artifacts, 10)
    plan = ReplayPlan(
        replay_id=f"fanout-{uuid.uuid4().hex[:8]}",
        source_run_id=source.run_id,
        mode=ReplayMode.RECORDED,
        repeat=3,
    )
    outcome = await stack.replay(plan)
    assert outcome.status is ReplayStatus.COMPLETED and len(outcome.children) == 3
    history = await stack.client.get_workflow_handle(plan.replay_id).fetch_history()
    order = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            order.append((attrs.activity_type.name, attrs.task_queue.name))
        elif event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            order.append(("child", ""))
    announce = ("expect_sandboxes", REPLAY_QUEUE)
    # announced once (3 children: one batch), before the first child is started, and answered
    assert order.count(announce) == 1
    assert order.index(announce) < order.index(("child", ""))
    scheduled = next(
        e.event_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "expect_sandboxes"
    )
    assert any(
        e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        and e.activity_task_completed_event_attributes.scheduled_event_id == scheduled
        for e in history.events
    )

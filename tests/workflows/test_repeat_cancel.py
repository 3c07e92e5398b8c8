"""A ``--repeat`` parent cancelled while it announces its children to the replay pool
(``expect_sandboxes``, a hint whose failure changes nothing) is cancelled: before, the hint
swallowed the cancel and the parent went on to start its children (seen: a ``repeat 200``
cancelled at once ended COMPLETED)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from temporalio.client import WorkflowExecutionStatus

from devstack.temporal_server import start_temporal_dev_server
from examples.synthetic import record_synthetic_run
from models import ReplayMode
from models.queues import CONTROL_QUEUE
from models.replay_flow import ReplayPlan, ReplayWorkflowInput
from stores.bundle import open_stores
from tests.fixtures_replay import stack_settings
from worker.settings import Settings
from worker.temporal import connect, running_workers
from workflows.replay import ReplayWorkflow


async def _until(predicate, what: str, tries: int = 600) -> None:
    for _ in range(tries):
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what}: not reached")


async def test_a_cancel_during_the_fanout_hint_cancels_the_parent(tmp_path: Path) -> None:
    # a dev server of its own (the session's shared one has other tests' workers on the same
    # queues), with control workers only: the hint waits on the replay queue, served by nobody
    temporal = start_temporal_dev_server(tmp_path / "temporal", headless=True)
    try:
        await _cancel_during_the_hint(stack_settings(tmp_path, temporal.address))
    finally:
        temporal.stop(timeout=20)


async def _cancel_during_the_hint(settings: Settings) -> None:
    async with open_stores(settings.stores) as stores:
        source = await record_synthetic_run(stores.ledger, stores.artifacts, 10)
    client = await connect(settings)
    plan = ReplayPlan(
        replay_id=f"replay-{uuid.uuid4().hex[:12]}",
        source_run_id=source.run_id,
        mode=ReplayMode.RECORDED,
        repeat=4,
    )
    async with running_workers(settings, "control", client):
        handle = await client.start_workflow(
            ReplayWorkflow.run,
            ReplayWorkflowInput(plan=plan),
            id=plan.replay_id,
            task_queue=CONTROL_QUEUE,
        )

        async def hinting() -> bool:
            pending = (await handle.describe()).raw_description.pending_activities
            return any(a.activity_type.name == "expect_sandboxes" for a in pending)

        await _until(hinting, "the parent announcing its children")
        await handle.cancel()

        async def ended() -> bool:
            return (await handle.describe()).status != WorkflowExecutionStatus.RUNNING

        await _until(ended, "the parent ending")
        assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED

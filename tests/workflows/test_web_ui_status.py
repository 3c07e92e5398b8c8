"""Issue 30, item 7: a replay Replaybook judged FAILED is a COMPLETED workflow to Temporal (its
result is the outcome its readers need), so its status is where the Web UI shows it: the
``ReplayStatus`` search attribute (a list column or filter) and the workflow's current
details (its page)."""

from __future__ import annotations

import uuid

from temporalio.api.sdk.v1 import WorkflowMetadata

from examples.support_desk.spec import run_scenario
from models import ReplayMode, ReplayStatus
from models.replay_flow import ReplayPlan
from workflows.replay import REPLAY_STATUS


async def test_a_failed_replay_says_failed_where_the_web_ui_looks(replay_stack) -> None:
    stack = replay_stack
    run = await run_scenario(
        stack.world, stack.stores.ledger, stack.stores.artifacts, "happy", seed=3
    )
    plan = ReplayPlan(
        replay_id=f"replay-ui-{uuid.uuid4().hex[:8]}",
        source_run_id=run.run_id,
        mode=ReplayMode.PROMPT_SWAP,
        prompt_version="v99",  # the worker refuses it while preparing: the replay FAILS
    )
    outcome = await stack.replay(plan)
    assert outcome.status is ReplayStatus.FAILED
    handle = stack.client.get_workflow_handle(plan.replay_id)
    described = await handle.describe()
    assert described.typed_search_attributes.get(REPLAY_STATUS) == "FAILED"
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert metadata.current_details.startswith("Replaybook: FAILED: ")
    assert "v99" in metadata.current_details

"""A long ingested run whose replay diverges ends with a verdict through Temporal (issue 31
item 8): the small version of ``python -m bench --only long_replay`` (12,000 steps there).

An 800-step run reported through the ingestion core; its header's declared model-call limit
stops the replayed loop early, so the replay never files the recorded report and differs from
the source in every later step. The outcome Temporal carries names the whole comparison by
its artifact digest and carries only its first differences; ``replay status`` (the view the
CLI and the API print) shows the verdict and the reference."""

from __future__ import annotations

import uuid

from app.replays import replay_view
from bench.long_replay import ingest_long_run
from models import ReplayMode, ReplayStatus
from models.enums import ReplayVerdict
from models.replay import ReplayComparison
from models.replay_flow import ReplayPlan


async def test_a_long_diverging_ingested_replay_ends_with_a_verdict(
    replay_stack,
) -> None:
    stack = replay_stack
    run_id = await ingest_long_run(stack.stores, 800, diverging=True)
    plan = ReplayPlan(
        replay_id=f"replay-long-{uuid.uuid4().hex[:10]}",
        source_run_id=run_id,
        mode=ReplayMode.RECORDED,
    )
    outcome = await stack.replay(plan)
    assert outcome.status is ReplayStatus.COMPLETED, outcome.reason
    assert outcome.verdict is ReplayVerdict.NOT_REPRODUCED, outcome
    carried = outcome.comparison
    assert carried is not None and carried.ref is not None
    assert not carried.same_side_effects  # the report was never filed
    # the first differences travel, the rest stay in the artifact
    assert carried.diffs_total is not None and len(carried.diffs) < carried.diffs_total
    whole = ReplayComparison.model_validate_json(await stack.stores.artifacts.get(carried.ref))
    assert len(whole.diffs) == carried.diffs_total > 300
    assert whole.diffs[: len(carried.diffs)] == carried.diffs

    view = await replay_view(stack.client, plan.replay_id)
    assert view["status"] == "COMPLETED" and view["verdict"] == "NOT_REPRODUCED", view
    assert view["comparison"]["ref"] == carried.ref
    assert view["comparison"]["diffs_total"] == carried.diffs_total

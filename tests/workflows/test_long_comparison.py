"""A long diverging replay's comparison travels by reference: the activity's result (and so
the replay's outcome in Temporal's history) carries the artifact digest of the whole
comparison and only its first differences, never thousands of them (past Temporal's 2 MB
payload limit the replay failed with TMPRL1103 instead of ending with a verdict).
``python -m bench.long_comparison`` measures it on a 10,000-step run."""

from __future__ import annotations

from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import ActivityEnvironment

from activities.replay import CARRIED_DIFF_BYTES, ReplayActivities
from bench.synthetic_replay import synthetic_replays
from examples.synthetic import record_synthetic_run
from models import ReplayMode
from models.replay import ReplayComparison
from models.replay_flow import ReplayPlan
from tests.fixtures_replay import stack_settings


async def test_a_long_diverging_comparison_travels_by_reference(tmp_path: Path) -> None:
    async with synthetic_replays(stack_settings(tmp_path, "unused").stores, 1000) as replays:
        # a replay run that stopped calling the tool after 200 of the source's 1,000 steps
        short = await record_synthetic_run(replays.stores.ledger, replays.stores.artifacts, 200)
        plan = ReplayPlan(
            replay_id=short.run_id, source_run_id=replays.source_run_id, mode=ReplayMode.RECORDED
        )
        activities = ReplayActivities(replays.engine)
        result = await ActivityEnvironment().run(activities.compare_replay, plan)
        carried = result.comparison
        assert result.reproduced is False and not carried.same_tool_sequence
        (payload,) = pydantic_data_converter.payload_converter.to_payloads([result])
        assert payload.ByteSize() < CARRIED_DIFF_BYTES + 16 * 1024
        assert carried.ref is not None and carried.diffs_total is not None
        assert 0 < len(carried.diffs) < carried.diffs_total
        whole = ReplayComparison.model_validate_json(
            await replays.stores.artifacts.get(carried.ref)
        )
        # the whole comparison, by its digest: every difference, the carried ones first
        assert len(whole.diffs) == carried.diffs_total >= 800
        assert whole.diffs[: len(carried.diffs)] == carried.diffs
        assert len(whole.model_dump_json()) > 2 * payload.ByteSize()
        assert whole.first_divergent_step == carried.first_divergent_step == "s00200"

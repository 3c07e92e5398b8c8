"""``python -m bench.long_comparison [STEPS]``: the comparison of a long diverging replay as it
travels through Temporal (issue 31 item 8).

Records a synthetic run of STEPS steps (10,000 by default: a registered synthetic graph) and a
200-step run that stands for a replay that stopped calling the tool, runs the
``compare_replay`` activity on them and prints, as JSON: the whole comparison's size and
differences (the artifact the result names by digest) and the size of the payload the
activity returns (what Temporal records; its limit is 2 MB, TMPRL1103 past it).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import ActivityEnvironment

from activities.replay import ReplayActivities
from bench.synthetic_replay import synthetic_replays
from examples.synthetic import record_synthetic_run
from models import ReplayMode
from models.replay_flow import ReplayPlan
from stores.config import StoreSettings

TEMPORAL_PAYLOAD_LIMIT = 2 * 1024 * 1024


async def measure(steps: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as home:
        settings = StoreSettings(home=Path(home))  # SQLite and artifacts under it
        async with synthetic_replays(settings, steps) as replays:
            short = await record_synthetic_run(replays.stores.ledger, replays.stores.artifacts, 200)
            plan = ReplayPlan(
                replay_id=short.run_id,
                source_run_id=replays.source_run_id,
                mode=ReplayMode.RECORDED,
            )
            began = time.perf_counter()
            activities = ReplayActivities(replays.engine)
            result = await ActivityEnvironment().run(activities.compare_replay, plan)
            seconds = time.perf_counter() - began
            (payload,) = pydantic_data_converter.payload_converter.to_payloads([result])
            assert result.comparison.ref is not None
            whole = await replays.stores.artifacts.get(result.comparison.ref)
            return {
                "source_steps": steps,
                "reproduced": result.reproduced,
                "differences": result.comparison.diffs_total or len(result.comparison.diffs),
                "differences_carried": len(result.comparison.diffs),
                "whole_comparison_bytes": len(whole),
                "whole_over_temporal_limit": len(whole) > TEMPORAL_PAYLOAD_LIMIT,
                "activity_payload_bytes": payload.ByteSize(),
                "compare_seconds": round(seconds, 2),
            }


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    print(json.dumps(asyncio.run(measure(steps)), indent=2))


if __name__ == "__main__":
    main()

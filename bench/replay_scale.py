"""Benchmark: RECORDED replays through Temporal with the workers' default settings, a short run
against a run 10x longer (issue 35 item 2). ``python -m bench --only replay-scale``.

Everything real, as ``bench.bench_replay``: a Temporal dev server on free ports, the workers in
this process with the default sandbox settings (bubblewrap, the default write quotas: nothing
raised), the SQLite ledger in a temporary directory. Both runs are recorded first, then replayed
in interleaved rounds (short, long, long, short, ...); each replay must end COMPLETED and
reproduced, not partial. Goal: the long replay at most 1.2x its share of the steps (10x the
steps: at most 12x the short one's wall time). The synthetic graph exists at 10, 200, 1,000 and
10,000 steps (``examples.synthetic.LENGTHS``): the quick size is 10 against 200. ``--steps LONG`` (``python -m bench.replay_scale 50000``) replays one long run once.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import Row, Spread, emit, machine_load, ratio_spread
from devstack.temporal_server import start_temporal_dev_server
from examples.synthetic import record_synthetic_run
from models import ReplayMode, ReplayStatus
from models.queues import CONTROL_QUEUE
from models.replay_flow import ReplayPlan, ReplayWorkflowInput
from stores.bundle import open_stores
from worker.settings import Settings
from worker.temporal import connect, running_workers
from workflows.replay import ReplayWorkflow

#: the long replay's time at most this much more than in proportion to its steps (1.2: 10x the
#: steps in at most 12x the time)
GOAL_SLACK = 1.2


async def _replays(sizes: tuple[int, ...], rounds: int) -> dict[int, list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        server = start_temporal_dev_server(home / "temporal", headless=True)
        try:
            settings = Settings.from_env(
                {
                    "REPLAYBOOK_HOME": str(home),
                    "REPLAYBOOK_DATABASE_URL": f"sqlite+aiosqlite:///{home / 'rb.db'}",
                    "TEMPORAL_ADDRESS": server.address,
                    "REPLAYBOOK_LOG_FORMAT": "json",
                }
            )
            async with open_stores(settings.stores) as stores:
                runs = {
                    n: (await record_synthetic_run(stores.ledger, stores.artifacts, n)).run_id
                    for n in sizes
                }
            client = await connect(settings)
            times: dict[int, list[float]] = {n: [] for n in sizes}
            async with running_workers(settings, "all", client):
                for r in range(rounds):
                    for n in sizes if r % 2 == 0 else tuple(reversed(sizes)):
                        plan = ReplayPlan(
                            replay_id=f"bench-scale-{uuid.uuid4().hex[:10]}",
                            source_run_id=runs[n],
                            mode=ReplayMode.RECORDED,
                        )
                        started = time.perf_counter()
                        outcome = await client.execute_workflow(
                            ReplayWorkflow.run,
                            ReplayWorkflowInput(plan=plan),
                            id=plan.replay_id,
                            task_queue=CONTROL_QUEUE,
                        )
                        seconds = time.perf_counter() - started
                        assert outcome.status is ReplayStatus.COMPLETED, outcome.reason
                        assert outcome.reproduced and not outcome.partial, outcome.reason
                        times[n].append(seconds)
            return times
        finally:
            server.stop(timeout=20)


def rows(sizes: tuple[int, int] = (1_000, 10_000), rounds: int = 3) -> list[Row]:
    short, long = sizes
    goal = GOAL_SLACK * long / short
    times = asyncio.run(_replays(sizes, rounds))
    ratio = ratio_spread(times[long], times[short])
    return [
        emit(
            Row(
                figure=f"{long:,}-step RECORDED replay through Temporal, default settings "
                f"(median of {rounds})",
                value=Spread.of(times[long]).text(scale=1, unit="s", digits=1),
                baseline=f"{short:,} steps " + Spread.of(times[short]).text(1, "s", 1),
                ratio=ratio.median,
                goal=f"<= {goal:g}x the {short:,}-step time "
                f"(rounds {ratio.low:.1f}–{ratio.high:.1f}x); COMPLETED, reproduced",
                met=ratio.median <= goal,
                load=machine_load(),
            )
        )
    ]


def main() -> list[dict[str, object]]:
    return [row.as_dict() for row in rows()]


if __name__ == "__main__":
    if len(sys.argv) > 1:  # one long replay, once (50,000 steps: minutes)
        steps = int(sys.argv[1])
        seconds = asyncio.run(_replays((steps,), 1))[steps]
        print(f"{steps:,} steps: COMPLETED, reproduced in {statistics.median(seconds):.1f} s")
    else:
        main()

"""Benchmark: RECORDED replays through Temporal with the workers' default settings, runs of
growing length (issue 35 item 2). ``python -m bench --only replay-scale [--steps 1000,10000,50000]``.

Everything real (``bench.stack``): a Temporal dev server on free ports, the workers in this
process with the default sandbox settings (bubblewrap, the default write quotas: nothing
raised), the SQLite ledger in a temporary directory. The runs are recorded first
(``record_synthetic_run_bulk``: the synthetic recorder's run, written in bulk), then replayed in
interleaved rounds (shortest to longest, then back, ...); each replay must end COMPLETED and
reproduced, not partial. Each length is compared with the one before it: goal, at most 1.2x
its share of the steps (1,000 to 10,000 steps: at most 12x the time; 10,000 to 50,000: 6x).
The synthetic graph exists at the lengths of ``examples.synthetic.LENGTHS`` (10 to 50,000).
The default is 1,000 and 10,000 steps in 3 rounds; the 50,000-step replay (minutes each) is
asked for with ``--steps``. ``--quick``: 10 against 200.

``python -m bench.replay_scale STEPS [ROUNDS]`` replays one run of STEPS steps ROUNDS times
(default once) and prints the times.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
import uuid

from bench.common import Row, Spread, emit, machine_load, ratio_spread
from bench.stack import bench_stack
from bench.synthetic_replay import record_synthetic_run_bulk
from models import ReplayMode, ReplayStatus
from models.replay_flow import ReplayPlan

#: each length's time at most this much more than in proportion to its steps against the
#: length before it (1.2: 10x the steps in at most 12x the time)
GOAL_SLACK = 1.2
DEFAULT_STEPS = (1_000, 10_000)
ROUNDS = 3


async def _replays(sizes: tuple[int, ...], rounds: int) -> dict[int, list[float]]:
    async with bench_stack() as stack:
        runs = {}
        for n in sizes:
            began = time.perf_counter()
            runs[n] = (
                await record_synthetic_run_bulk(stack.stores.ledger, stack.stores.artifacts, n)
            ).run_id
            print(
                f"{n:,}-step source recorded in {time.perf_counter() - began:.1f} s "
                f"({machine_load()})",
                file=sys.stderr,
                flush=True,
            )
        times: dict[int, list[float]] = {n: [] for n in sizes}
        async with stack.workers():
            for r in range(rounds):
                for n in sizes if r % 2 == 0 else tuple(reversed(sizes)):
                    plan = ReplayPlan(
                        replay_id=f"bench-scale-{uuid.uuid4().hex[:10]}",
                        source_run_id=runs[n],
                        mode=ReplayMode.RECORDED,
                    )
                    started = time.perf_counter()
                    outcome = await stack.replay(plan)
                    seconds = time.perf_counter() - started
                    assert outcome.status is ReplayStatus.COMPLETED, outcome.reason
                    assert outcome.reproduced and not outcome.partial, outcome.reason
                    times[n].append(seconds)
                    print(
                        f"round {r + 1}: {n:,} steps COMPLETED, reproduced in {seconds:.1f} s "
                        f"({machine_load()})",
                        file=sys.stderr,
                        flush=True,
                    )
    return times


def rows(sizes: tuple[int, ...] = DEFAULT_STEPS, rounds: int = ROUNDS) -> list[Row]:
    """One row per length after the first, against the length before it."""
    sizes = tuple(sorted(sizes))
    times = asyncio.run(_replays(sizes, rounds))
    out = []
    for short, long in itertools.pairwise(sizes):
        goal = GOAL_SLACK * long / short
        ratio = ratio_spread(times[long], times[short])
        out.append(
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
        )
    return out


def main(steps: tuple[int, ...] = DEFAULT_STEPS, rounds: int = ROUNDS) -> list[dict[str, object]]:
    return [row.as_dict() for row in rows(steps, rounds)]


if __name__ == "__main__":
    if len(sys.argv) > 1:  # one length (50,000 steps: minutes a replay)
        steps, repeat = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1
        seconds = asyncio.run(_replays((steps,), repeat))[steps]
        print(
            f"{steps:,} steps: COMPLETED, reproduced in "
            + ", ".join(f"{s:.1f}" for s in seconds)
            + " s"
        )
    else:
        main()

"""Benchmark: recorded playback of a 1,000-step run through Temporal, and fork-at-90% versus a
full replay. Run with ``.venv/bin/python -m bench.bench_replay`` (or ``python -m bench``).

Everything is real (``bench.stack``): a Temporal dev server on free ports, workers in this
process, the SQLite ledger in a temporary directory. Baselines measured in the same run:

* playback: the same replay driven in-process by the engine without Temporal — the ratio is
  the cost of durability (one activity per step);
* fork: the full replay through Temporal — the ratio is how much cheaper a fork at 90% is;
* sandbox: the same full replay through Temporal with the development flag (steps in the
  worker's process, no bubblewrap) — the ratio is the cost of isolating the steps (rule 16).
Goals: playback of 1,000 steps <= 5 s (issue 21); fork at 90% >= 5x cheaper than the full
replay. The workers are started just before the first replay, so its first batch may not find
the warm sandbox process ready yet (a worker that has been up has it).
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Any

from activities.sandbox.config import NO_ISOLATION
from app.local_replay import run_prepared
from bench.common import Row, Spread, emit, machine_load, ratio_spread
from bench.stack import bench_stack
from examples.synthetic import record_synthetic_run
from models import ReplayMode, ReplayStatus
from models.replay_flow import ReplayPlan
from runtime.replay.engine import ReplayEngine
from worker.agents import open_world
from worker.temporal import catalogs

STEPS = 1000
PLAYBACK_GOAL_S = 5.0
FORK_GOAL = 5.0
#: interleaved rounds of the full replay and the fork (medians and spread)
ROUNDS = 3


def _plan(run_id: str, **kw: Any) -> ReplayPlan:
    return ReplayPlan(
        replay_id=f"bench-{uuid.uuid4().hex[:10]}",
        source_run_id=run_id,
        mode=kw.pop("mode", ReplayMode.RECORDED),
        **kw,
    )


async def _in_process(engine: ReplayEngine, plan: ReplayPlan) -> int:
    return (await run_prepared(engine, plan, await engine.prepare(plan))).steps


async def _run(steps: int, rounds: int) -> dict[str, Any]:
    async with bench_stack() as stack:
        stores, settings = stack.stores, stack.settings
        source = await record_synthetic_run(stores.ledger, stores.artifacts, steps)
        engine = ReplayEngine(
            stores.ledger,
            stores.evidence,
            stores.artifacts,
            catalogs(open_world(settings.stores.database_url)),
        )
        started = time.perf_counter()
        await _in_process(engine, _plan(source.run_id))
        in_process = time.perf_counter() - started

        async def through_temporal(plan: ReplayPlan, isolation: str) -> float:
            started = time.perf_counter()
            outcome = await stack.replay(plan)
            assert outcome.status is ReplayStatus.COMPLETED and outcome.reproduced, outcome.reason
            assert outcome.isolation == isolation, outcome.isolation
            return time.perf_counter() - started

        # the workers' default: steps in bubblewrap; the full replay and the fork at 90% (the
        # last 10% regenerated, from the step named) in interleaved rounds, their order
        # alternating (one sample of each read 3.7-6.5x across runs)
        fork_step = f"s{int(steps * 0.9):05d}"
        fulls: list[float] = []
        forks: list[float] = []
        async with stack.workers():
            for r in range(rounds):
                for kind in ("full", "fork") if r % 2 == 0 else ("fork", "full"):
                    if kind == "full":
                        fulls.append(await through_temporal(_plan(source.run_id), "bubblewrap"))
                    else:
                        plan = _plan(
                            source.run_id, mode=ReplayMode.FORK_FROM_STEP, from_step=fork_step
                        )
                        forks.append(await through_temporal(plan, "bubblewrap"))
        sandbox_off = settings.sandbox.model_copy(update={"isolation": NO_ISOLATION})
        async with stack.workers(settings.model_copy(update={"sandbox": sandbox_off})):
            baseline = await through_temporal(_plan(source.run_id), NO_ISOLATION)
    return {
        "steps": steps,
        "in_process_s": in_process,
        "temporal_s": statistics.median(fulls),
        "fork_s": statistics.median(forks),
        "full_rounds": fulls,
        "fork_rounds": forks,
        "unsandboxed_s": baseline,
    }


def main(steps: int = STEPS, rounds: int = ROUNDS) -> dict[str, Any]:
    r = asyncio.run(_run(steps, rounds))
    load = machine_load()
    full, fork = Spread.of(r["full_rounds"]), Spread.of(r["fork_rounds"])
    ratios = ratio_spread(r["full_rounds"], r["fork_rounds"])
    emit(
        Row(
            figure=f"{steps:,}-step RECORDED replay through Temporal (bubblewrap; median of "
            f"{rounds} rounds)",
            value=full.text(1, "s", 2),
            baseline=f"in-process engine {r['in_process_s']:.2f} s",
            ratio=r["temporal_s"] / r["in_process_s"],
            goal=f"<= {PLAYBACK_GOAL_S:g} s",
            met=r["temporal_s"] <= PLAYBACK_GOAL_S,
            load=load,
        )
    )
    emit(
        Row(
            figure=f"fork at 90% against the full replay (interleaved, median of {rounds} rounds)",
            value=fork.text(1, "s", 2),
            baseline=f"full replay {full.text(1, 's', 2)}",
            ratio=full.median / fork.median,
            goal=f">= {FORK_GOAL:g}x cheaper (rounds {ratios.low:.1f}–{ratios.high:.1f}x)",
            met=full.median / fork.median >= FORK_GOAL,
            load=load,
        )
    )
    emit(
        Row(
            figure="sandboxed replay against steps in the worker's process",
            value=f"{r['temporal_s']:.2f} s (median)",
            baseline=f"unsandboxed (development flag) {r['unsandboxed_s']:.2f} s",
            ratio=r["temporal_s"] / r["unsandboxed_s"],
            goal="—",
            met=None,
            load=load,
        )
    )
    return r


if __name__ == "__main__":
    main()

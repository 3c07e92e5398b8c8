"""Benchmark: child replay start-up with a warm sandbox pool against a cold start.

Run with ``.venv/bin/python -m bench.bench_pool`` (``python -m bench`` runs it). A 10-step
synthetic run is replayed (RECORDED, sandboxed under bubblewrap) by a runner whose pool keeps
one process started ahead, and by one without a pool, in interleaved rounds; the figure is the
time from a replay's first batch being asked for to its answer (one step), median of rounds.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from activities.sandbox.config import SandboxSettings
from activities.sandbox.runner import SandboxedSteps
from bench.common import Row, emit, machine_load
from bench.synthetic_replay import SyntheticReplays, synthetic_replays
from worker.settings import Settings

GOAL_S = 0.2


async def _first_batch(replays: SyntheticReplays, runner: SandboxedSteps) -> float:
    step = await replays.first_step(1, prefix="replay-bench")
    started = time.perf_counter()
    await runner.run_steps(step)
    elapsed = time.perf_counter() - started
    await runner.close(step.plan.replay_id)
    return elapsed


async def _run(rounds: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        settings = Settings.from_env(
            {
                "REPLAYBOOK_HOME": str(home),
                "REPLAYBOOK_DATABASE_URL": f"sqlite+aiosqlite:///{home / 'rb.db'}",
                "REPLAYBOOK_LOG_FORMAT": "json",
            }
        )
        async with synthetic_replays(settings.stores, 10) as replays:
            warm = replays.runner(SandboxSettings(warm_processes=1))
            cold = replays.runner(SandboxSettings(warm_processes=0))
            times: dict[str, list[float]] = {"warm": [], "cold": []}
            try:
                for _ in range(rounds):
                    await warm.warm_up()  # as between child replays: the pool has refilled
                    times["warm"].append(await _first_batch(replays, warm))
                    times["cold"].append(await _first_batch(replays, cold))
            finally:
                await warm.aclose()
                await cold.aclose()
            return {name: statistics.median(values) for name, values in times.items()}


def main(rounds: int = 5) -> dict[str, float]:
    r = asyncio.run(_run(rounds))
    emit(
        Row(
            figure="child replay start-up: first batch (1 step, bubblewrap) with a warm pool",
            value=f"{r['warm'] * 1e3:.0f} ms",
            baseline=f"cold start {r['cold'] * 1e3:.0f} ms",
            ratio=r["cold"] / r["warm"],
            goal=f"<= {GOAL_S:g} s with a warm pool",
            met=r["warm"] <= GOAL_S,
            load=machine_load(),
        )
    )
    return r


if __name__ == "__main__":
    main()

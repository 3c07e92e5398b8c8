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
import uuid
from pathlib import Path

from activities.sandbox.config import SandboxSettings
from activities.sandbox.runner import SandboxedSteps
from bench.common import Row, emit, machine_load
from examples.synthetic import record_synthetic_run
from models import ReplayMode
from models.replay_flow import ReplayPlan, StepInput
from runtime.replay.engine import ReplayEngine
from stores.bundle import open_stores
from stores.sql.support_desk_world import SqlWorldStore
from worker.catalogs import catalogs
from worker.settings import Settings
from worker.temporal import CATALOG_FACTORY

GOAL_S = 0.2


async def _first_batch(engine: ReplayEngine, runner: SandboxedSteps, run_id: str) -> float:
    plan = ReplayPlan(
        replay_id=f"replay-bench-{uuid.uuid4().hex[:10]}",
        source_run_id=run_id,
        mode=ReplayMode.RECORDED,
        steps_per_activity=1,
    )
    prepared = await engine.prepare(plan)
    assert prepared.ok, prepared.problems
    step = StepInput(
        plan=plan,
        step_id=prepared.start_step,
        state_ref=prepared.state_ref,
        cursors=prepared.cursors,
        head=prepared.head,
    )
    started = time.perf_counter()
    await runner.run_steps(step)
    elapsed = time.perf_counter() - started
    await runner.close(plan.replay_id)
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
        async with open_stores(settings.stores) as stores:
            engine = ReplayEngine(
                stores.ledger,
                stores.evidence,
                stores.artifacts,
                catalogs(SqlWorldStore.beside(stores.db.engine.url)),
            )
            source = await record_synthetic_run(stores.ledger, stores.artifacts, 10)
            warm = SandboxedSteps(
                engine, SandboxSettings(warm_processes=1), catalog_factory=CATALOG_FACTORY
            )
            cold = SandboxedSteps(engine, SandboxSettings(), catalog_factory=CATALOG_FACTORY)
            times: dict[str, list[float]] = {"warm": [], "cold": []}
            try:
                for _ in range(rounds):
                    await warm.warm_up()  # as between child replays: the pool has refilled
                    times["warm"].append(await _first_batch(engine, warm, source.run_id))
                    times["cold"].append(await _first_batch(engine, cold, source.run_id))
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

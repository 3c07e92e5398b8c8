"""Benchmark: the web console's pages against the API's JSON for the same data, in the same
run (``python -m bench.ui``; ``python -m bench --only ui``).

- the run page (``GET /ui/runs/{id}``, the evidence timeline) of a 1,000-step run against
  ``GET /api/runs/{id}`` (the same run as JSON); goal ≤ 1 s server time;
- the runs page (``GET /ui/runs``, 25 rows with chain head and side effects by state) with
  100,000 runs in the store against ``GET /api/runs?limit=25``; goal ≤ 300 ms.

Server time: each request goes to the application in process (ASGI, no socket), so the time
is the server's own. Rounds interleave the page and its baseline; medians of ``rounds``.
The 100,000 runs are the recorded runs' header rows cloned (ids and times of their own):
what a runs page reads is those rows, and per row (chain head, side effects) lookups by run
id, so their number is what matters, not the clones' events.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import insert, select

from api import create_app
from api.auth import Role
from api.config import ApiConfig
from bench.common import Row, emit, machine_load
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.spec import run_scenario
from examples.synthetic import record_synthetic_run
from stores.bundle import open_stores
from stores.sql import schema
from stores.sql.support_desk_world import SqlWorldStore
from worker.settings import Settings

RUN_PAGE_GOAL_S = 1.0
RUNS_PAGE_GOAL_S = 0.3
TOKEN = "bench-viewer"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def _clone_runs(stores: Any, template_id: str, count: int) -> None:
    """``count`` header rows like ``template_id``'s, one a minute before T0 going back."""
    r = schema.runs
    async with stores.db.engine.begin() as conn:
        row = (await conn.execute(select(r).where(r.c.run_id == template_id))).mappings().one()
        record = row["record"] if isinstance(row["record"], dict) else json.loads(row["record"])
        for start in range(0, count, 5_000):
            batch = []
            for n in range(start, min(count, start + 5_000)):
                run_id = f"run-clone-{n:07d}"
                batch.append(
                    {
                        **row,
                        "run_id": run_id,
                        "created_at": T0 - timedelta(minutes=n),
                        "record": {**record, "run_id": run_id},
                    }
                )
            await conn.execute(insert(r), batch)


async def _timed(
    candidates: dict[str, Callable[[], Awaitable[httpx.Response]]], rounds: int
) -> dict[str, list[float]]:
    """Wall seconds of each request per round (``NAME``), and the process's CPU seconds
    (``NAME cpu``: the server's own work, which a loaded machine delays but does not grow)."""
    samples: dict[str, list[float]] = {n: [] for name in candidates for n in (name, f"{name} cpu")}
    for fetch in candidates.values():  # warm up; every answer must be a 200
        answer = await fetch()
        assert answer.status_code == 200, (answer.status_code, answer.text[:300])
    order = list(candidates)
    for n in range(rounds):
        for name in order if n % 2 == 0 else reversed(order):
            started, cpu = time.perf_counter(), time.process_time()
            await candidates[name]()
            samples[name].append(time.perf_counter() - started)
            samples[f"{name} cpu"].append(time.process_time() - cpu)
    return samples


async def _run(runs: int, steps: int, rounds: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="bench-ui-"))
    settings = Settings.from_env(
        {
            "REPLAYBOOK_HOME": str(home),
            "TEMPORAL_ADDRESS": "127.0.0.1:1",  # no page measured here needs Temporal
            "REPLAYBOOK_LOG_FORMAT": "json",
        }
    )
    async with open_stores(settings.stores) as stores:
        world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
        await world.ensure()
        small = await run_scenario(world, stores.ledger, stores.artifacts, "wrong-customer", seed=1)
        big = await record_synthetic_run(stores.ledger, stores.artifacts, steps)
        await _clone_runs(stores, small.run_id, runs - 2)
    app = create_app(settings, ApiConfig(tokens={TOKEN: frozenset({Role.VIEWER})}))
    headers = {"authorization": f"Bearer {TOKEN}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:

        def get(path: str) -> Callable[[], Awaitable[httpx.Response]]:
            return lambda: client.get(path, headers=headers)

        run_page = await _timed(
            {"ui": get(f"/ui/runs/{big.run_id}"), "api": get(f"/api/runs/{big.run_id}")}, rounds
        )
        runs_page = await _timed({"ui": get("/ui/runs"), "api": get("/api/runs?limit=25")}, rounds)
        rows = (await client.get("/ui/runs", headers=headers)).text.count(
            '<tr>\n<td><a href="/ui/runs/'
        )
    await app.state.api.close()
    return {
        "runs": runs,
        "steps": steps,
        "rounds": rounds,
        "rows_on_page": rows,
        "run_page": run_page,
        "runs_page": runs_page,
    }


def main(runs: int = 100_000, steps: int = 1_000, rounds: int = 5) -> dict[str, Any]:
    r = asyncio.run(_run(runs, steps, rounds))
    load = machine_load()
    for key, what, goal in (
        (
            "run_page",
            f"run page of a {steps:,}-step run (GET /ui/runs/ID, server time)",
            RUN_PAGE_GOAL_S,
        ),
        (
            "runs_page",
            f"runs page with {runs:,} runs (GET /ui/runs, 25 rows, server time)",
            RUNS_PAGE_GOAL_S,
        ),
    ):
        ui, api, ui_cpu, api_cpu = (
            statistics.median(r[key][name]) for name in ("ui", "api", "ui cpu", "api cpu")
        )
        emit(
            Row(
                figure=f"{what}, median of {rounds} interleaved rounds",
                value=f"{ui * 1e3:.0f} ms (CPU {ui_cpu * 1e3:.0f} ms)",
                baseline=f"API JSON of the same data {api * 1e3:.0f} ms (CPU {api_cpu * 1e3:.0f} ms)",
                ratio=ui / api,
                goal=f"≤ {goal * 1e3:.0f} ms",
                met=ui <= goal,
                load=load,
            )
        )
    return r


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.ui", description=__doc__)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from bench.common import TABLE_HEADER

    print(TABLE_HEADER)
    main(args.runs, args.steps, args.rounds)

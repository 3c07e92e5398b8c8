"""The warm sandbox pool: started processes wait for a replay, a replay's first batch takes
one (no sandbox start on its path) with the same results, the pool refills itself, and every
process (warm, kept) is gone after ``aclose``."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from activities.sandbox.config import SandboxSettings
from activities.sandbox.runner import SandboxedSteps
from examples.synthetic import record_synthetic_run
from runtime.replay.engine import ReplayEngine
from stores.bundle import open_stores
from stores.sql.support_desk_world import SqlWorldStore
from tests.fixtures_replay import stack_settings
from tests.sandbox.test_pool import _recorded, _replay
from worker.catalogs import catalogs
from worker.temporal import CATALOG_FACTORY as CATALOGS


async def _until(predicate, seconds: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_a_replay_takes_a_warm_process_and_the_pool_refills(tmp_path: Path) -> None:
    async with open_stores(stack_settings(tmp_path, "unused").stores) as stores:
        engine = ReplayEngine(
            stores.ledger,
            stores.evidence,
            stores.artifacts,
            catalogs(SqlWorldStore.beside(stores.db.engine.url)),
        )
        source = await record_synthetic_run(stores.ledger, stores.artifacts, 10)
        warm = SandboxedSteps(engine, SandboxSettings(warm_processes=1), catalog_factory=CATALOGS)
        cold = SandboxedSteps(engine, SandboxSettings(), catalog_factory=CATALOGS)
        try:
            await warm.warm_up()
            (waiting,) = warm.warm
            assert warm.started == 1
            warm_id, warm_out = await _replay(engine, warm, source.run_id)
            # the replay ran in the process that was waiting (kept across its batches), and
            # one more was started to wait for the next replay: no start on the replay's path
            await _until(lambda: len(warm.warm) == 1)
            assert waiting not in warm.warm
            assert (warm.started, warm.batches) == (2, 4)
            cold_id, cold_out = await _replay(engine, cold, source.run_id)
            assert (warm_out.state_ref, warm_out.cursors) == (cold_out.state_ref, cold_out.cursors)
            assert await _recorded(stores.ledger, warm_id) == await _recorded(
                stores.ledger, cold_id
            )
            pids = warm.warm
        finally:
            await warm.aclose()
            await cold.aclose()
        assert warm.warm == [] and warm.kept == {}
        for pid in pids:
            await _until(lambda pid=pid: not _alive(pid))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"

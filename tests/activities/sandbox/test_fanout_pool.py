"""A fan-out announced to the sandbox pool (``SandboxedSteps.expect``): the pool grows to one
started process per announced child, the children's first batches take them (no start on
their path) with the same results, and the pool does not grow with fan-outs switched off."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from activities.sandbox.config import SandboxSettings
from activities.sandbox.demand import EXPECT_SECONDS, Demand
from bench.synthetic_replay import synthetic_replays
from tests.fixtures_replay import stack_settings


async def _until(predicate, seconds: float = 90.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_an_announced_fan_out_finds_its_processes_started(tmp_path: Path) -> None:
    async with synthetic_replays(stack_settings(tmp_path, "unused").stores, 10) as replays:
        pool = replays.runner(SandboxSettings(warm_processes=0))
        off = replays.runner(SandboxSettings(warm_processes=0, fanout_warm=0))
        try:
            assert pool.expect("fan", 3) == 3
            await _until(lambda: len(pool.warm) == 3)
            steps = [await replays.first_step(10, prefix="fan") for _ in range(3)]
            outs = await asyncio.gather(*(pool.run_steps(step) for step in steps))
            # each child ran in a process started before it came; nothing more was started
            assert (pool.started, pool.batches) == (3, 3)
            assert pool.warm == [] and all(out.finished for out in outs)
            assert len({(o.state_ref, o.cursors) for o in outs}) == 1
            # fan-outs switched off: the announcement starts nothing
            assert off.expect("fan", 3) == 0
            await asyncio.sleep(0)
            assert off.warm == [] and off.started == 0
        finally:
            await pool.aclose()
            await off.aclose()


def test_demand_counts_children_to_come_by_fan_out() -> None:
    demand = Demand()
    demand.expect("INC-1-exact", 10, now=0.0)
    demand.expect("INC-1-cf1", 10, now=0.0)
    demand.expect("INC-1-exact", 20, now=1.0)  # the parent's own announcement replaces
    assert demand.wanted(1.0) == 30
    demand.taken("INC-1-exact-000")
    demand.taken("INC-1-cf1-003")
    demand.taken("elsewhere-000")  # not announced: nothing changes
    assert demand.wanted(2.0) == 28
    assert demand.next_lapse() == EXPECT_SECONDS
    # an announcement nobody came for lapses
    assert demand.wanted(EXPECT_SECONDS + 0.5) == 19
    assert demand.wanted(EXPECT_SECONDS + 1.5) == 0

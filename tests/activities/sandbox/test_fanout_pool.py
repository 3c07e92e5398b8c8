"""A fan-out announced to the sandbox pool (``SandboxedSteps.expect``): without sibling sharing
the pool grows to one started process per announced child, the children's first batches take
them (no start on their path) with the same results, and the pool does not grow with fan-outs
switched off; with sharing (the default) the siblings take turns in their group's few
processes, each replay's evidence the same as in a process of its own, and replays of another
fan-out or of none never use the group's processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from activities.sandbox.config import SandboxSettings
from activities.sandbox.demand import EXPECT_SECONDS, Demand
from activities.sandbox.process import kill_sandbox
from bench.synthetic_replay import SyntheticReplays, next_batch, synthetic_replays
from models.replay_flow import StepInput, StepOutput
from tests.activities.sandbox.test_pool import _recorded
from tests.fixtures_replay import stack_settings
from tests.waiting import until


async def _until(predicate, seconds: float = 90.0) -> None:
    await until(predicate, seconds)


async def test_an_announced_fan_out_finds_its_processes_started(tmp_path: Path) -> None:
    async with synthetic_replays(stack_settings(tmp_path, "unused").stores, 10) as replays:
        pool = replays.runner(SandboxSettings(warm_processes=0, fanout_share=0))
        off = replays.runner(SandboxSettings(warm_processes=0, fanout_warm=0, fanout_share=0))
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


async def _whole(runner, step: StepInput) -> tuple[str, StepOutput]:
    """Run a replay's batches from its first to its end: its id and its last output."""
    while True:
        out = await runner.run_steps(step)
        if out.finished:
            return step.plan.replay_id, out
        step = next_batch(step, out)


async def _first_steps(replays: SyntheticReplays, prefix: str, count: int) -> list[StepInput]:
    return [await replays.first_step(4, prefix=prefix) for _ in range(count)]


async def test_siblings_share_their_groups_processes_with_separate_evidence(
    tmp_path: Path,
) -> None:
    async with synthetic_replays(stack_settings(tmp_path, "unused").stores, 10) as replays:
        shared = replays.runner(SandboxSettings(warm_processes=0, fanout_share=2))
        own = replays.runner(SandboxSettings(warm_processes=0, fanout_share=0))
        try:
            # five children announced: the pool starts two processes, the group's share
            assert shared.expect("fan", 5) == 2
            await _until(lambda: len(shared.warm) == 2)
            ran = await asyncio.gather(
                *(_whole(shared, s) for s in await _first_steps(replays, "fan", 5))
            )
            # five replays of 3 batches each took turns in the two processes: no other start
            assert (shared.started, shared.batches) == (2, 15)
            ((group, pids),) = shared.shared.items()
            assert group[:2] == ("fan", replays.source_run_id) and len(pids) == 2
            # the parent's next batch of children announced: the group has its processes
            assert shared.expect("fan", 5) == 0
            # each replay's evidence is its own and the same as a replay in its own process
            alone_id, alone = await _whole(own, (await _first_steps(replays, "fan", 1))[0])
            assert own.started == 1 and own.shared == {}
            expected = await _recorded(replays.stores.ledger, alone_id)
            for replay_id, out in ran:
                assert await _recorded(replays.stores.ledger, replay_id) == expected
                assert (out.state_ref, out.cursors) == (alone.state_ref, alone.cursors)
            # the group's processes died while idle: a sibling finds one new process, whole
            for pid in pids:
                kill_sandbox(pid)
            await _until(lambda: _idle_pids(shared) == [])
            late_id, _ = await _whole(shared, (await _first_steps(replays, "fan", 1))[0])
            assert await _recorded(replays.stores.ledger, late_id) == expected
            assert shared.started == 3 and len(shared.shared[group]) == 1
            pids = shared.shared[group]
            started = shared.started
            # another fan-out, and a replay of none, never take the group's processes
            shared.expect("other", 1)
            await _whole(shared, (await _first_steps(replays, "other", 1))[0])
            solo_id, _ = await _whole(shared, (await _first_steps(replays, "solo", 1))[0])
            assert shared.shared[group] == pids
            others = [p for k, ps in shared.shared.items() if k != group for p in ps]
            assert len(others) == 1 and others[0] not in pids
            assert shared.started == started + 2 and solo_id not in shared.kept  # released
        finally:
            await shared.aclose()
            await own.aclose()
        assert shared.shared == {} and shared.warm == []


def _idle_pids(runner) -> list[int]:
    """Pids of the runner's idle shared processes that are still alive."""
    alive = []
    for pids in runner.shared.values():
        alive += [p for p in pids if Path(f"/proc/{p}").exists() and _running(p)]
    return alive


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


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
    # a key stays a known fan-out (its children share) until its last announcement lapses
    assert demand.announced("INC-1-exact", EXPECT_SECONDS + 0.5)
    assert not demand.announced("INC-1-cf1", EXPECT_SECONDS + 0.5)
    assert not demand.announced("elsewhere", 0.0)

"""``heartbeating``: the first heartbeat comes after one interval, so an activity shorter than
that sends none (the SDK would send a first heartbeat to the server at once, and the
activity's completion would wait for it: a round trip more for every short step batch)."""

from __future__ import annotations

import asyncio

from temporalio.testing import ActivityEnvironment

from activities.heartbeat import heartbeating


async def test_a_short_activity_sends_no_heartbeat() -> None:
    env = ActivityEnvironment()
    beats: list[tuple[object, ...]] = []
    env.on_heartbeat = lambda *details: beats.append(details)

    async def short() -> str:
        async with heartbeating("step-1", every=3600):
            await asyncio.sleep(0)  # the block yields to the loop, as an activity does
        return "done"

    assert await env.run(short) == "done"
    assert beats == []


async def test_a_long_activity_heartbeats_with_its_detail() -> None:
    env = ActivityEnvironment()
    beat = asyncio.Event()
    beats: list[tuple[object, ...]] = []

    def on_heartbeat(*details: object) -> None:
        beats.append(details)
        beat.set()

    env.on_heartbeat = on_heartbeat

    async def long() -> None:
        async with heartbeating("step-2", every=0.01):
            await beat.wait()  # runs until it has heartbeated

    await asyncio.wait_for(env.run(long), timeout=30)
    assert beats[0] == ("step-2",)

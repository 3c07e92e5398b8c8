"""Heartbeats for long activities: Temporal notices a dead worker within the activity's
heartbeat timeout (``models.queues.HEARTBEAT_TIMEOUT_SECONDS``) instead of waiting out its
whole start-to-close timeout, so a worker killed mid-activity costs seconds, not minutes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from temporalio import activity

#: how often a running activity heartbeats (well inside its heartbeat timeout)
HEARTBEAT_EVERY_SECONDS = 2.0


async def _beat(detail: str, every: float) -> None:
    # the first beat after one interval, not at the start: the SDK sends a first heartbeat to
    # the server at once, and an activity's completion waits for a heartbeat still in flight
    # (sdk-core's heartbeat manager, ``evict``). A short activity (a fan-out child's first
    # step batch: ~50 ms) then paid a server round trip more, and the server an RPC more per
    # activity, on a busy machine 0.1-0.2 s each (issue 35 item 4)
    while True:
        await asyncio.sleep(every)
        activity.heartbeat(detail)


@contextlib.asynccontextmanager
async def heartbeating(detail: str, every: float = HEARTBEAT_EVERY_SECONDS) -> AsyncIterator[None]:
    """Heartbeat every ``every`` seconds while the block runs (the first after ``every``
    seconds: an activity shorter than that sends none)."""
    beating = asyncio.create_task(_beat(detail, every))
    try:
        yield
    finally:
        beating.cancel()

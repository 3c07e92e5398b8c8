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
    while True:
        activity.heartbeat(detail)
        await asyncio.sleep(every)


@contextlib.asynccontextmanager
async def heartbeating(detail: str, every: float = HEARTBEAT_EVERY_SECONDS) -> AsyncIterator[None]:
    """Heartbeat every ``every`` seconds while the block runs."""
    beating = asyncio.create_task(_beat(detail, every))
    try:
        yield
    finally:
        beating.cancel()

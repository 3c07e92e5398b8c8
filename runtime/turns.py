"""Long reads that let the event loop run: a worker reading a 50,000-step run in one loop held
it for seconds, and its activities' heartbeats did not get out (they were retried; issue 35)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import TypeVar

T = TypeVar("T")


async def in_turns(items: Iterable[T], every: int) -> AsyncIterator[T]:
    """``items`` one by one, with a turn of the event loop after each ``every`` of them."""
    for index, item in enumerate(items):
        if index and not index % every:
            await asyncio.sleep(0)
        yield item

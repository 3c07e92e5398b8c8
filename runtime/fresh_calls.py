"""Calls of one key made at the same time share one call — one that started after each of
them was made, so none gets an answer read before it asked.

An incident starts 10-60 sibling replays of one source run at once, and each one's preparation
verified the source's chain and scored its evidence on the worker's event loop (about 8 and
5 ms of CPU each): 60 of each, while the siblings' first batches waited for that loop
(issue 35 item 4). ``FreshCalls`` runs one call for a key at a time: callers that arrive while
one runs wait for it to end and then share the next one, which they all asked for before it
began. A check that must see the data as it is when it is asked for (a chain that may have
been tampered with since the last check) still does; the work is done twice at most, not once
per caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["FreshCalls"]

T = TypeVar("T")


class FreshCalls(Generic[T]):
    """``await calls(key)``: ``call(key)``'s result, from a call shared with the callers of
    ``key`` waiting at the same time, started after this one asked (its failure too)."""

    def __init__(self, call: Callable[[str], Awaitable[T]]) -> None:
        self._call = call
        #: per key, the call under way and the one the callers since it began wait for
        self._running: dict[str, asyncio.Task[T]] = {}
        self._queued: dict[str, asyncio.Task[T]] = {}

    async def __call__(self, key: str) -> T:
        queued = self._queued.get(key)
        if queued is None:
            queued = asyncio.ensure_future(self._after(self._running.get(key), key))
            self._queued[key] = queued
        # a caller cancelled does not cancel the call the others share
        return await asyncio.shield(queued)

    async def _after(self, previous: asyncio.Task[T] | None, key: str) -> T:
        if previous is not None:
            await asyncio.wait([previous])
        me = asyncio.current_task()
        assert me is not None
        if self._queued.get(key) is me:  # from here on, a new caller waits for the next call
            del self._queued[key]
        self._running[key] = me
        try:
            return await self._call(key)
        finally:
            if self._running.get(key) is me:
                del self._running[key]

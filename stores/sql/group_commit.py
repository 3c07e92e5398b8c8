"""Group commit: appends that arrive while one transaction is being written are written
together in the next, so many concurrent recorders share one commit (and one fsync on
PostgreSQL) instead of paying one each. A lone appender pays nothing extra: its batch is just
itself. A failing append never takes others down: the batch is retried one by one.

With several lanes, several transactions are in flight at once, split by key (the run): a
key is pinned to one lane while any of its requests is queued or being written, so the
requests of one key are written in order, one transaction after the other; an idle key goes
to the least busy lane. Where commits wait for the disk (PostgreSQL), transactions in flight
together share its flushes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

R = TypeVar("R")
T = TypeVar("T")


@dataclass
class _Lane(Generic[R, T]):
    pending: list[tuple[R, asyncio.Future[T]]] = field(default_factory=list)
    #: the batch being written now
    writing: list[tuple[R, asyncio.Future[T]]] = field(default_factory=list)
    flusher: asyncio.Task[None] | None = None

    def load(self) -> int:
        return len(self.pending) + len(self.writing)


class GroupCommitter(Generic[R, T]):
    """``write_batch`` writes a batch in one transaction and returns each request's result
    (an exception: that request alone failed, the others are written); raising fails the
    whole batch (nothing written), and its requests are then written one by one."""

    def __init__(
        self,
        write_batch: Callable[[list[R]], Awaitable[list[T | Exception]]],
        max_batch: int = 256,
        *,
        lanes: int = 1,
        key: Callable[[R], str] = lambda _: "",
    ) -> None:
        self._write_batch = write_batch
        self._max_batch = max_batch
        self._lanes: list[_Lane[R, T]] = [_Lane() for _ in range(max(1, lanes))]
        self._key = key
        #: the lane of each key with requests in flight, and how many
        self._pinned: dict[str, tuple[int, int]] = {}

    async def submit(self, request: R) -> T:
        return await self.enqueue(request)

    def enqueue(self, request: R) -> asyncio.Future[T]:
        """Queue ``request`` behind those of its key queued before it and return at once; the
        future resolves once its batch is committed (a key's requests are written in queue
        order)."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        if len(self._lanes) == 1:  # one lane: every key's requests in it, in queue order
            lane = self._lanes[0]
        else:
            key = self._key(request)
            index, count = self._pinned.get(key, (-1, 0))
            if count == 0:
                index = min(range(len(self._lanes)), key=lambda i: self._lanes[i].load())
            self._pinned[key] = (index, count + 1)
            lane = self._lanes[index]
        lane.pending.append((request, future))
        if lane.flusher is None or lane.flusher.done():
            lane.flusher = asyncio.create_task(self._flush(lane))
        return future

    def _unpin(self, batch: list[tuple[R, asyncio.Future[T]]]) -> None:
        """The requests of ``batch`` are written (or failed): their keys may change lanes once
        none of theirs is queued or being written (a cancelled appender's request too: it was
        in the lane until now)."""
        if len(self._lanes) == 1:
            return
        for request, _ in batch:
            key = self._key(request)
            index, count = self._pinned[key]
            if count == 1:
                del self._pinned[key]
            else:
                self._pinned[key] = (index, count - 1)

    async def drain(self) -> None:
        """Wait until every request queued so far is written (or failed)."""
        waiting = [
            future
            for lane in self._lanes
            for _, future in (*lane.writing, *lane.pending)
            if not future.done()
        ]
        if waiting:
            await asyncio.wait(waiting)

    async def _flush(self, lane: _Lane[R, T]) -> None:
        while lane.pending:
            batch, lane.pending = (
                lane.pending[: self._max_batch],
                lane.pending[self._max_batch :],
            )
            lane.writing = batch
            try:
                results = await self._write_batch([request for request, _ in batch])
            except Exception as exc:
                if len(batch) == 1:
                    _settle(batch[0][1], exc)
                else:
                    await self._one_by_one(batch)
            else:
                for (_, future), result in zip(batch, results, strict=True):
                    _settle(future, result)
            finally:
                lane.writing = []
                self._unpin(batch)

    async def _one_by_one(self, batch: list[tuple[R, asyncio.Future[T]]]) -> None:
        for request, future in batch:
            try:
                (result,) = await self._write_batch([request])
            except Exception as exc:  # handed to the appender that made this request
                result = exc
            _settle(future, result)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"GroupCommitter(pending={[lane.load() for lane in self._lanes]})"


def _settle(future: asyncio.Future[T], result: T | Exception) -> None:
    if future.done():
        return
    if isinstance(result, Exception):
        future.set_exception(result)
    else:
        future.set_result(result)

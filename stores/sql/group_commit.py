"""Group commit: appends that arrive while one transaction is being written are written
together in the next, so many concurrent recorders share one commit (and one fsync on
PostgreSQL) instead of paying one each. A lone appender pays nothing extra: its batch is just
itself. A failing append never takes others down: the batch is retried one by one."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

R = TypeVar("R")
T = TypeVar("T")


class GroupCommitter(Generic[R, T]):
    def __init__(
        self, write_batch: Callable[[list[R]], Awaitable[list[T]]], max_batch: int = 256
    ) -> None:
        self._write_batch = write_batch
        self._max_batch = max_batch
        self._pending: list[tuple[R, asyncio.Future[T]]] = []
        #: the batch being written now
        self._writing: list[tuple[R, asyncio.Future[T]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def submit(self, request: R) -> T:
        return await self.enqueue(request)

    def enqueue(self, request: R) -> asyncio.Future[T]:
        """Queue ``request`` behind those queued before it and return at once; the future
        resolves once its batch is committed (requests are written in queue order)."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return future

    async def drain(self) -> None:
        """Wait until every request queued so far is written (or failed)."""
        waiting = [future for _, future in (*self._writing, *self._pending)]
        if waiting:
            await asyncio.wait(waiting)

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = (
                self._pending[: self._max_batch],
                self._pending[self._max_batch :],
            )
            self._writing = batch
            try:
                results = await self._write_batch([request for request, _ in batch])
            except Exception as exc:
                if len(batch) == 1:
                    if not batch[0][1].done():
                        batch[0][1].set_exception(exc)
                else:
                    await self._one_by_one(batch)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)
        self._writing = []

    async def _one_by_one(self, batch: list[tuple[R, asyncio.Future[T]]]) -> None:
        for request, future in batch:
            try:
                (result,) = await self._write_batch([request])
            except Exception as exc:  # handed to the appender that made this request
                if not future.done():
                    future.set_exception(exc)
            else:
                if not future.done():
                    future.set_result(result)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"GroupCommitter(pending={len(self._pending)})"

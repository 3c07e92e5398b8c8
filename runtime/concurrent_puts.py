"""Artifact puts in the background (``start_put``), and those of one request run side by
side (``ConcurrentPuts``).

A content-addressed store names bytes by their sha256, so a put's answer is known before the
bytes are written: the caller goes on while the puts run concurrently (their writes and
fsyncs overlap instead of queueing one after the other), and ``settle`` waits for all of them
before anything that references them is recorded. What stays true is the write-ahead rule of
``runtime.write_behind``: a committed event never references an artifact that is not there.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from models.digest import sha256_digest
from models.errors import StoreError
from runtime.ports import ArtifactStore
from runtime.write_behind import Write, _retrieved, first_failure, wait_for_writes

__all__ = ["ConcurrentPuts", "start_put"]


def start_put(store: ArtifactStore, data: bytes, digest: str) -> Write:
    """Start putting ``data`` (whose digest is ``digest``) into ``store`` in the background:
    the write under way, done once the bytes are durable."""
    task = asyncio.ensure_future(_checked_put(store, data, digest))
    task.add_done_callback(_retrieved)
    return task


async def _checked_put(store: ArtifactStore, data: bytes, digest: str) -> None:
    stored = await store.put(data)
    if stored != digest:  # a content-addressed store names bytes by their sha256
        raise StoreError(f"artifact store {store.location} put {digest} as {stored}")


class ConcurrentPuts:
    """``store`` with its puts in the background until ``settle``; reads of an artifact being
    put wait for it. Everything else is the store's."""

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store
        self.location = store.location
        self._puts: dict[str, Write] = {}

    async def put(self, data: bytes) -> str:
        data = bytes(data)
        digest = sha256_digest(data)
        if digest not in self._puts:
            self._puts[digest] = start_put(self.store, data, digest)
        return digest

    async def settle(self) -> None:
        """Wait until every put so far is durable; raises the first that failed."""
        await self._wait(list(self._puts.values()))

    async def _wait(self, puts: list[Write]) -> None:
        if puts:
            await wait_for_writes(puts)  # not cancelled with the caller: others may wait too
            failure = first_failure(puts)
            if failure is not None:
                raise failure

    async def _written(self, digest: str) -> None:
        put = self._puts.get(digest)
        await self._wait([put] if put is not None else [])

    async def get(self, digest: str) -> bytes:
        await self._written(digest)
        return await self.store.get(digest)

    async def exists(self, digest: str) -> bool:
        await self._written(digest)
        return await self.store.exists(digest)

    async def delete(self, digest: str) -> None:
        await self._written(digest)
        await self.store.delete(digest)

    async def set_legal_hold(self, digest: str, on: bool) -> None:
        await self._written(digest)
        await self.store.set_legal_hold(digest, on)

    async def legal_hold(self, digest: str) -> bool:
        return await self.store.legal_hold(digest)

    async def set_retention(self, digest: str, until: datetime) -> None:
        await self._written(digest)
        await self.store.set_retention(digest, until)

    async def retention(self, digest: str) -> datetime | None:
        return await self.store.retention(digest)

    def enforced_by_backend(self) -> bool:
        return self.store.enforced_by_backend()

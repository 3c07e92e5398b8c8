"""Ingestion's artifact puts run side by side (``runtime.concurrent_puts.ConcurrentPuts``) and
are all durable before the events that reference them are written: a put that fails leaves
nothing recorded."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ingest.core import ingest_events, ingest_run
from models.digest import sha256_digest
from models.errors import RunNotFoundError, StoreError
from runtime.concurrent_puts import ConcurrentPuts
from stores.artifacts import LocalArtifactStore
from tests.runtime.test_ingest_races import batch, header


class GatedStore(LocalArtifactStore):
    """A local store whose puts wait at a gate, counting how many are in flight at once; a
    put of bytes holding ``fail`` fails."""

    def __init__(self, root: Path, fail: bytes | None = None) -> None:
        super().__init__(root)
        self.gate = asyncio.Event()
        self.in_flight = self.most_in_flight = 0
        self.fail = fail
        #: set once three puts are in flight together
        self.three_at_once = asyncio.Event()

    async def put(self, data: bytes) -> str:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        if self.in_flight >= 3:
            self.three_at_once.set()
        try:
            await self.gate.wait()
            if self.fail is not None and self.fail in data:
                raise StoreError("disk full")
            return await super().put(data)
        finally:
            self.in_flight -= 1


async def test_puts_answer_at_once_run_together_and_settle_when_written(tmp_path: Path) -> None:
    store = GatedStore(tmp_path)
    puts = ConcurrentPuts(store)
    digests = [await puts.put(f"object {i}".encode()) for i in range(3)]
    assert digests == [sha256_digest(f"object {i}".encode()) for i in range(3)]
    assert await puts.put(b"object 0") == digests[0]  # the same bytes: one put
    settled = asyncio.ensure_future(puts.settle())
    reading = asyncio.ensure_future(puts.get(digests[1]))
    await asyncio.wait_for(store.three_at_once.wait(), 10)
    assert not settled.done() and not reading.done()  # nothing written yet
    store.gate.set()
    await asyncio.wait_for(settled, 10)
    assert await reading == b"object 1"
    assert [await store.get(d) for d in digests] == [f"object {i}".encode() for i in range(3)]


async def test_settle_raises_the_failed_put(tmp_path: Path) -> None:
    store = GatedStore(tmp_path, fail=b"bad")
    store.gate.set()
    puts = ConcurrentPuts(store)
    await puts.put(b"good")
    await puts.put(b"bad")
    with pytest.raises(StoreError, match="disk full"):
        await puts.settle()


async def test_a_failed_put_leaves_nothing_ingested(rec, tmp_path: Path) -> None:
    run_id = f"failed-put-{rec.db.dialect}"
    store = GatedStore(tmp_path / "gated", fail=b"You help.")
    store.gate.set()
    with pytest.raises(StoreError, match="disk full"):
        await ingest_run(rec.ledger, store, header(run_id))
    with pytest.raises(RunNotFoundError):
        await rec.ledger.get_run(run_id)
    # started properly, a batch whose message cannot be stored records none of its events
    assert (await ingest_run(rec.ledger, rec.artifacts, header(run_id))).recorded == 1
    head = (await rec.ledger.verify(run_id)).head_sequence
    store.fail = b"lost line"
    line = {"type": "user_message", "sequence": 1, "content": "lost line", "done": False}
    answer = {"type": "model_call", "sequence": 2, "model": "m", "content": "ok"}
    with pytest.raises(StoreError, match="disk full"):
        await ingest_events(rec.ledger, store, rec.evidence, run_id, batch(line, answer).events)
    result = await rec.ledger.verify(run_id)
    assert result.intact and result.head_sequence == head


async def test_local_puts_settle_when_durable_or_raise(tmp_path: Path) -> None:
    """The local store's puts (on its writer threads): ``settle`` waits for them, and
    raises the one that failed."""
    store = LocalArtifactStore(tmp_path / "ok")
    puts = ConcurrentPuts(store)
    digests = [await puts.put(f"object {i}".encode()) for i in range(3)]
    await puts.settle()
    assert [await store.get(d) for d in digests] == [f"object {i}".encode() for i in range(3)]
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "sha256").write_text("a file where the directory should be")
    puts = ConcurrentPuts(LocalArtifactStore(broken))
    await puts.put(b"nowhere to go")
    with pytest.raises(StoreError, match="cannot write artifact"):
        await puts.settle()

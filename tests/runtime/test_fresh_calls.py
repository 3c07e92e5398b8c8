"""``FreshCalls`` (pure asyncio): callers of one key at the same time share a call that began
after each of them asked — what the sibling replays of an incident verify their source with."""

from __future__ import annotations

import asyncio

import pytest

from runtime.fresh_calls import FreshCalls


class Source:
    """A call that reads ``value`` when it begins and ends when ``gate`` opens."""

    def __init__(self) -> None:
        self.value = 0
        self.began: list[tuple[str, int]] = []
        self.gate = asyncio.Event()
        self.started = asyncio.Event()
        self.failure: Exception | None = None

    async def read(self, key: str) -> tuple[str, int]:
        seen = (key, self.value)
        self.began.append(seen)
        self.started.set()
        await self.gate.wait()
        if self.failure is not None:
            raise self.failure
        return seen


async def test_callers_at_the_same_time_share_one_call() -> None:
    source = Source()
    calls = FreshCalls(source.read)
    waiting = [asyncio.ensure_future(calls("run-1")) for _ in range(20)]
    await source.started.wait()
    source.gate.set()
    assert await asyncio.gather(*waiting) == [("run-1", 0)] * 20
    assert source.began == [("run-1", 0)]


async def test_callers_during_a_call_share_the_next_one_which_reads_after_they_asked() -> None:
    source = Source()
    calls = FreshCalls(source.read)
    first = asyncio.ensure_future(calls("run-1"))
    await source.started.wait()  # the first call has read value 0
    source.value = 1  # changed (a tampered chain) after the first call read it
    later = [asyncio.ensure_future(calls("run-1")) for _ in range(10)]
    source.gate.set()
    assert await first == ("run-1", 0)
    # none of the later callers gets the answer read before it asked
    assert await asyncio.gather(*later) == [("run-1", 1)] * 10
    assert source.began == [("run-1", 0), ("run-1", 1)]
    # and a caller after both asks anew
    source.value = 2
    assert await calls("run-1") == ("run-1", 2)


async def test_keys_are_not_shared() -> None:
    source = Source()
    calls = FreshCalls(source.read)
    source.gate.set()
    assert await asyncio.gather(calls("a"), calls("b")) == [("a", 0), ("b", 0)]
    assert sorted(source.began) == [("a", 0), ("b", 0)]


async def test_a_failure_goes_to_the_callers_of_that_call_only() -> None:
    source = Source()
    calls = FreshCalls(source.read)
    source.failure = RuntimeError("the store is gone")
    waiting = [asyncio.ensure_future(calls("run-1")) for _ in range(3)]
    await source.started.wait()
    source.gate.set()
    for future in waiting:
        with pytest.raises(RuntimeError, match="the store is gone"):
            await future
    source.failure = None
    assert await calls("run-1") == ("run-1", 0)
    assert len(source.began) == 2


async def test_a_cancelled_caller_leaves_the_shared_call_to_the_others() -> None:
    source = Source()
    calls = FreshCalls(source.read)
    leaving = asyncio.ensure_future(calls("run-1"))
    staying = asyncio.ensure_future(calls("run-1"))
    await source.started.wait()
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    source.gate.set()
    assert await staying == ("run-1", 0)
    assert source.began == [("run-1", 0)]

"""The group committer's lanes (pure unit tests: the writer is a function that records what
it was given): several batches in flight at once, split by key, each key's requests written
in order and never in two lanes at once."""

from __future__ import annotations

import asyncio

from stores.sql.group_commit import GroupCommitter


class Writer:
    """Writes batches after the test lets them go, recording each batch and how many were in
    flight together."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, int]]] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.gate = asyncio.Event()
        #: keys of the batches being written, and any key seen in two of them at once
        self.keys_in_flight: set[str] = set()
        self.overlaps: set[str] = set()

    async def write(self, batch: list[tuple[str, int]]) -> list[int | Exception]:
        keys = {key for key, _ in batch}
        self.overlaps |= keys & self.keys_in_flight
        self.keys_in_flight |= keys
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.batches.append(list(batch))
        await self.gate.wait()
        self.in_flight -= 1
        self.keys_in_flight -= keys
        return [ValueError(f"refused {key}#{n}") if n < 0 else n for key, n in batch]


def key_of(request: tuple[str, int]) -> str:
    return request[0]


async def test_two_lanes_keep_two_transactions_in_flight_and_each_key_in_order() -> None:
    writer = Writer()
    committer = GroupCommitter(writer.write, lanes=2, key=key_of)
    futures = [committer.enqueue((key, n)) for n in range(5) for key in ("a", "b", "c", "d")]
    await asyncio.sleep(0)  # the flushers start
    writer.gate.set()
    results = await asyncio.gather(*futures)
    assert results == [n for n in range(5) for _ in ("a", "b", "c", "d")]
    assert writer.most_in_flight == 2
    order: dict[str, list[int]] = {}
    for batch in writer.batches:
        for key, n in batch:
            order.setdefault(key, []).append(n)
    assert order == {key: list(range(5)) for key in "abcd"}
    # a key with requests in flight stays in its lane: never in two batches written together
    assert writer.overlaps == set()


async def test_a_key_is_pinned_to_its_lane_while_requests_are_in_flight() -> None:
    writer = Writer()
    committer = GroupCommitter(writer.write, lanes=2, key=key_of)
    first = committer.enqueue(("a", 0))
    second = committer.enqueue(("b", 0))  # the other lane: both in flight
    await asyncio.sleep(0)
    third = committer.enqueue(("a", 1))  # queued behind "a" 0, in "a"'s lane
    await asyncio.sleep(0)
    assert writer.batches == [[("a", 0)], [("b", 0)]]
    writer.gate.set()
    assert await asyncio.gather(first, second, third) == [0, 0, 1]
    assert writer.batches[-1] == [("a", 1)]


async def test_a_refused_request_fails_alone() -> None:
    writer = Writer()
    writer.gate.set()
    committer = GroupCommitter(writer.write, lanes=2, key=key_of)
    futures = [
        committer.enqueue(("a", 1)),
        committer.enqueue(("a", -1)),
        committer.enqueue(("a", 2)),
    ]
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert results[0] == 1 and results[2] == 2
    assert isinstance(results[1], ValueError) and "a#-1" in str(results[1])
    await committer.drain()


async def test_a_cancelled_appender_keeps_its_key_in_its_lane_until_its_batch_is_written() -> None:
    writer = Writer()
    committer = GroupCommitter(writer.write, lanes=2, key=key_of)
    busy = committer.enqueue(("b", 0))  # the first lane
    first = committer.enqueue(("a", 0))  # the other lane, being written below
    await asyncio.sleep(0)
    assert writer.batches == [[("b", 0)], [("a", 0)]]
    first.cancel()  # its appender gave up; its transaction is in flight all the same
    await asyncio.sleep(0)
    second = committer.enqueue(("a", 1))
    # queued behind "a" 0 in its lane, not in the first lane where it could be written
    # alongside it
    assert [request for request, _ in committer._lanes[1].pending] == [("a", 1)]
    assert committer._lanes[0].pending == []
    writer.gate.set()
    assert await asyncio.gather(busy, second) == [0, 1]
    assert writer.overlaps == set()
    assert committer._pinned == {}


async def test_one_lane_writes_every_key_in_queue_order() -> None:
    writer = Writer()
    writer.gate.set()
    committer = GroupCommitter(writer.write, key=key_of)
    futures = [committer.enqueue((key, n)) for n in range(3) for key in "ab"]
    assert await asyncio.gather(*futures) == [0, 0, 1, 1, 2, 2]
    assert [pair for batch in writer.batches for pair in batch] == [
        (key, n) for n in range(3) for key in "ab"
    ]
    assert committer._pinned == {}

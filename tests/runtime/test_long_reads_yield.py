"""Reading a long run lets the event loop run (issue 35 item 2): the ledger rows of a run, the
trajectory a replay is compared with and the source evidence a replay is prepared from are
turned into records in slices with a loop turn between two, so a worker's heartbeats go out
while a 50,000-step run is read (they did not: prepare_replay and compare_replay were retried
after heartbeat timeouts). A task beside the read counts the loop's turns; each record made
notes the count: no more than a slice of records is made without a turn between them."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest

from examples.synthetic import record_synthetic_run
from runtime import trajectory
from runtime.replay import source
from runtime.replay.source import load_source_evidence
from runtime.trajectory import load_trajectory
from stores.sql import ledger_reads
from tests.runtime.conftest import Recording

SLICE = 16


class Turns:
    """The loop turns a task running beside a read has had, and the count each record made
    during the read saw."""

    def __init__(self) -> None:
        self.count = 0
        self.seen: dict[str, list[int]] = {}

    def noting(self, name: str, make: Callable[..., Any]) -> Callable[..., Any]:
        seen = self.seen.setdefault(name, [])

        def noted(*args: Any, **kwargs: Any) -> Any:
            seen.append(self.count)
            return make(*args, **kwargs)

        return noted

    async def during(self, read: Awaitable[object]) -> None:
        done = False

        async def count() -> None:
            while not done:
                self.count += 1
                await asyncio.sleep(0)

        counter = asyncio.create_task(count())
        try:
            await read
        finally:
            done = True
            await counter

    def most_without_a_turn(self, name: str) -> int:
        return max(len(list(run)) for _, run in itertools.groupby(self.seen[name]))


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_long_reads_turn_the_loop_between_slices(
    rec: Recording, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await record_synthetic_run(rec.ledger, rec.artifacts, 1000)
    turns = Turns()
    monkeypatch.setattr(ledger_reads, "YIELD_EVERY_ROWS", SLICE)
    monkeypatch.setattr(trajectory, "YIELD_EVERY_EVENTS", SLICE)
    monkeypatch.setattr(source, "YIELD_EVERY_EVENTS", SLICE)
    monkeypatch.setattr(
        ledger_reads, "_event_model", turns.noting("rows", ledger_reads._event_model)
    )
    # the facts and the evidence are made from each event's payload, parsed first
    monkeypatch.setattr(
        trajectory, "json", SimpleNamespace(loads=turns.noting("facts", json.loads))
    )
    monkeypatch.setattr(source, "json", SimpleNamespace(loads=turns.noting("source", json.loads)))

    await turns.during(rec.ledger.events_with_payloads(run.run_id))
    await turns.during(load_trajectory(rec.ledger, run.run_id))
    await turns.during(load_source_evidence(rec.ledger, rec.evidence, rec.artifacts, run.run_id))
    # the run's 4,002 rows, then the trajectory's 2,002 (steps started, tool calls, the run's
    # ends) and the source's 3,002 (and the steps completed); the payloads of the tool calls
    # and the run's ends parsed into facts, every one of the source's events parsed
    assert len(turns.seen["rows"]) == 4002 + 2002 + 3002
    assert len(turns.seen["facts"]) >= 1000 and len(turns.seen["source"]) >= 3000
    for name in ("rows", "facts", "source"):
        assert turns.most_without_a_turn(name) <= SLICE, name

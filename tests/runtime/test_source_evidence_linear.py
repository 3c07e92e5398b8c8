"""Replay evidence in O(n): each step's start marks are positions (no per-step copy of the fixture
counts), the fork step's consumption is computed on demand with the counts the old per-step
copies held, and the engine's source cache is bounded by the bytes it holds."""

from __future__ import annotations

import json

import pytest

from examples.synthetic import record_synthetic_run
from models import ExecutionEventType as E
from runtime.replay.engine import ReplayEngine
from runtime.replay.source import load_source_evidence
from tests.runtime.conftest import Recording


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_marks_give_the_cumulative_consumption_of_each_step(rec: Recording) -> None:
    run = await record_synthetic_run(rec.ledger, rec.artifacts, 10)
    source = await load_source_evidence(rec.ledger, rec.evidence, rec.artifacts, run.run_id)
    # the counts before each step started (where a fork regenerating it resumes), recomputed
    # from the events
    expected: dict[str, dict[str, int]] = {}
    counts: dict[str, int] = {}
    for event, data in await rec.ledger.events_with_payloads(
        run.run_id, types=frozenset({E.TOOL_CALL, E.STEP_STARTED})
    ):
        if event.type is E.TOOL_CALL:
            request = json.loads(data or b"{}")["request_hash"]
            counts[request] = counts.get(request, 0) + 1
        else:
            expected.setdefault(event.step_id, dict(counts))
    assert len(source.starts) == 10
    for step, marks in source.starts.items():
        assert marks.fixtures == expected[step] and marks.next_step == step
        assert marks.retrievals == {}
    # one shared order list, not a copy per step
    orders = {id(m.fixture_order) for m in source.starts.values()}
    assert len(orders) == 1
    assert source.loaded_bytes > 0


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_the_source_cache_is_bounded_by_bytes(rec: Recording) -> None:
    runs = [await record_synthetic_run(rec.ledger, rec.artifacts, 10) for _ in range(3)]
    one = await load_source_evidence(rec.ledger, rec.evidence, rec.artifacts, runs[0].run_id)
    engine = ReplayEngine(
        rec.ledger, rec.evidence, rec.artifacts, {}, cache_bytes=2 * one.loaded_bytes + 1
    )
    for run in runs:
        await engine.source(run.run_id)
    assert list(engine._cache) == [runs[1].run_id, runs[2].run_id]
    tiny = ReplayEngine(rec.ledger, rec.evidence, rec.artifacts, {}, cache_bytes=1)
    for run in runs:
        await tiny.source(run.run_id)
    assert list(tiny._cache) == [runs[2].run_id]  # the newest always stays

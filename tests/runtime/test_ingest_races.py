"""Ingestion under concurrency and resends, on both SQL backends: concurrent different events
for one sequence record exactly one (the others are refused naming the sequence), identical
resends are accepted, every event type is idempotent and advances the sequence, and a refused
header leaves no run behind."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from ingest import ingest_events, ingest_run
from ingest.recorder import marker_of
from models.errors import RunNotFoundError, SequenceConflictError, StoreError
from models.ingest import IngestEventBatch, IngestRunHeader, IngestTool
from stores.sql.ledger import SqlLedger

START = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
WRITERS = 8
RUNS = 12


def header(run_id: str, **update: Any) -> IngestRunHeader:
    return IngestRunHeader(
        run_id=run_id,
        started_at=START,
        system_prompt="You help.",
        tools=(IngestTool(name="refund", destructive_hint=True),),
        **update,
    )


def batch(*events: dict[str, Any]) -> IngestEventBatch:
    return IngestEventBatch.model_validate({"events": list(events)})


async def _send(rec, run_id: str, events: IngestEventBatch) -> str:
    # each writer is a process of its own: its own ledger (and group committer)
    ledger = SqlLedger(rec.db, rec.artifacts)
    try:
        result = await ingest_events(ledger, rec.artifacts, rec.evidence, run_id, events.events)
    except SequenceConflictError as exc:
        assert f"event {events.events[0].sequence}" in str(exc)
        return "409"
    return "201" if result.recorded else "200"


async def test_concurrent_writers_record_one_event_per_sequence(rec) -> None:
    run_ids = [f"race-{rec.db.dialect}-{n}" for n in range(RUNS)]
    for run_id in run_ids:
        await ingest_run(rec.ledger, rec.artifacts, header(run_id))

    def variant(i: int) -> IngestEventBatch:
        return batch({"type": "user_message", "sequence": 1, "content": f"variant {i}"})

    answers = await asyncio.gather(
        *(_send(rec, run_id, variant(i)) for run_id in run_ids for i in range(WRITERS))
    )
    for n in range(RUNS):
        assert Counter(answers[n * WRITERS : (n + 1) * WRITERS]) == {"201": 1, "409": WRITERS - 1}

    same = batch({"type": "opaque", "sequence": 2, "source": "s", "reason": "r"})
    answers = await asyncio.gather(
        *(_send(rec, run_id, same) for run_id in run_ids for _ in range(WRITERS))
    )
    for n in range(RUNS):
        assert Counter(answers[n * WRITERS : (n + 1) * WRITERS]) == {"201": 1, "200": WRITERS - 1}

    for run_id in run_ids:
        events = await rec.ledger.events(run_id)
        per_sequence = Counter(
            (m.sequence, m.digest) for m in (marker_of(run_id, e) for e in events) if m is not None
        )
        # one client event per sequence (each may span several ledger events)
        assert sorted({s for s, _ in per_sequence}) == [0, 1, 2]
        assert len(per_sequence) == 3
        assert (await rec.ledger.verify(run_id)).intact


EVERY_TYPE: list[dict[str, Any]] = [
    {"type": "user_message", "content": "refund me"},
    {
        "type": "policy_decision",
        "policy_id": "p",
        "policy_version": "1",
        "input": {"a": 1},
        "decision": "ALLOW",
    },
    {"type": "retrieval", "query": "refund policy", "retriever_version": "r1"},
    {
        "type": "model_call",
        "model": "m",
        "content": None,
        "tool_calls": [{"id": "c1", "name": "refund", "arguments": {"amount": 5}}],
    },
    {
        "type": "approval",
        "approval_id": "a1",
        "approver": "ann",
        "capability": "refund",
        "arguments": {"amount": 5},
    },
    {
        "type": "tool_call",
        "tool_call_id": "c1",
        "name": "refund",
        "arguments": {"amount": 5},
        "output": "ok",
        "outcome": "TIMEOUT",
    },
    {
        "type": "side_effect",
        "tool_call_sequence": 6,
        "status": "RECONCILED",
        "reconciled_applied": True,
    },
    {"type": "checkpoint", "state": {"k": 1}},
    {"type": "opaque", "source": "s", "reason": "r"},
    {"type": "model_call", "model": "m", "content": "done", "tool_calls": []},
    {"type": "run_end", "outcome": {"ok": True}},
]


async def test_every_event_type_is_idempotent_and_advances_the_sequence(rec) -> None:
    run_id = f"every-type-{rec.db.dialect}"
    await ingest_run(rec.ledger, rec.artifacts, header(run_id))
    for sequence, event in enumerate(EVERY_TYPE, start=1):
        one = batch({**event, "sequence": sequence})
        first = await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, one.events)
        head = (await rec.ledger.events(run_id))[-1].sequence
        again = await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, one.events)
        assert (first.recorded, again.recorded, again.duplicates) == (1, 0, 1), event["type"]
        assert again.next_sequence == sequence + 1, event["type"]
        assert (await rec.ledger.events(run_id))[-1].sequence == head
        if event["type"] != "run_end":
            other = batch({"type": "opaque", "sequence": sequence, "source": "x", "reason": "y"})
            with pytest.raises(SequenceConflictError, match=f"event {sequence} is already"):
                await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, other.events)
    whole = batch(*({**e, "sequence": n} for n, e in enumerate(EVERY_TYPE, start=1)))
    result = await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, whole.events)
    assert result.recorded == 0 and result.duplicates == len(EVERY_TYPE)
    assert (await rec.ledger.verify(run_id)).intact


async def test_a_refused_header_leaves_no_run_and_the_corrected_one_is_accepted(rec) -> None:
    run_id = f"refused-header-{rec.db.dialect}"
    with pytest.raises(ValidationError, match="max_model_calls"):
        header(run_id, max_model_calls=1180591620717411303424)
    # a failure while the run is being started (a database error, a crash) rolls it all back
    ledger = SqlLedger(rec.db, rec.artifacts)

    async def fail(*args: Any, **kwargs: Any) -> Any:
        raise StoreError("the database went away")

    ledger.append_locked = fail  # type: ignore[method-assign]
    ledger._start_fast = fail  # type: ignore[method-assign]  # its own test: test_start_run_fast
    with pytest.raises(StoreError):
        await ingest_run(ledger, rec.artifacts, header(run_id, labels={"v": "bad"}))
    with pytest.raises(RunNotFoundError):
        await rec.ledger.get_run(run_id)
    good = header(run_id, labels={"v": "good"})
    assert (await ingest_run(rec.ledger, rec.artifacts, good)).recorded == 1
    answers = await asyncio.gather(
        *(
            ingest_run(SqlLedger(rec.db, rec.artifacts), rec.artifacts, header(f"{run_id}-c"))
            for _ in range(WRITERS)
        )
    )
    assert sorted(a.recorded for a in answers) == [0] * (WRITERS - 1) + [1]
    assert (await rec.ledger.verify(f"{run_id}-c")).intact

"""Ingestion keeps each run's state between batches (keyed by the head it appended at): a
batch reads nothing of the run's history, whatever its length, and a state made stale by
another writer is found out by the conditional append and rebuilt, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event

from ingest import ingest_events, ingest_run
from ingest.state import states_of
from models.errors import SequenceConflictError
from models.ingest import IngestEventBatch, IngestRunHeader
from runtime.completeness import evidence_completeness
from stores.sql.ledger import SqlLedger

START = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def turn(sequence: int) -> dict[str, Any]:
    """Client event ``sequence``: a user line, then the model's answer to it, and so on."""
    at = (START + timedelta(seconds=sequence)).isoformat()
    if sequence % 2:
        return {
            "type": "user_message",
            "content": f"line {sequence}",
            "done": False,
            "sequence": sequence,
            "at": at,
        }
    return {
        "type": "model_call",
        "model": "m-1",
        "content": f"answer {sequence}",
        "tool_calls": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        "sequence": sequence,
        "at": at,
    }


def batch(first: int, count: int = 4) -> Any:
    events = [turn(s) for s in range(first, first + count)]
    return IngestEventBatch.model_validate({"events": events}).events


async def start(rec: Any, run_id: str) -> None:
    await ingest_run(
        rec.ledger, rec.artifacts, IngestRunHeader(run_id=run_id, started_at=START, labels={})
    )


class Sql:
    def __init__(self, rec: Any) -> None:
        self.sql: list[str] = []
        self._engine = rec.db.engine.sync_engine
        event.listen(self._engine, "before_cursor_execute", self._on)

    def _on(self, _c: Any, _cur: Any, statement: str, *_: Any) -> None:
        self.sql.append(statement)

    def close(self) -> None:
        event.remove(self._engine, "before_cursor_execute", self._on)


async def test_a_batch_reads_nothing_of_the_runs_history(rec: Any) -> None:
    run_id = "cached-1"
    await start(rec, run_id)
    await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, batch(1))
    per_batch: list[list[str]] = []
    for first in range(5, 5 + 4 * 60, 4):
        watch = Sql(rec)
        try:
            await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, batch(first))
        finally:
            watch.close()
        per_batch.append(watch.sql)
    reads_of_events = [
        s
        for b in per_batch
        for s in b
        if s.lstrip().upper().startswith("SELECT") and "execution_events" in s
    ]
    assert reads_of_events == []
    # the same statements at event 8 as at event 244: the cost does not grow with the run
    assert per_batch[0] == per_batch[-1]
    assert (await rec.ledger.verify(run_id)).head_sequence == len(await rec.ledger.events(run_id))
    assert (await rec.ledger.verify(run_id)).intact


async def test_a_state_made_stale_by_another_writer_is_rebuilt(rec: Any) -> None:
    run_id = "cached-2"
    await start(rec, run_id)
    other = SqlLedger(rec.db, rec.artifacts)  # another API process: its own cache and writer
    await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, batch(1))
    await ingest_events(other, rec.artifacts, rec.evidence, run_id, batch(5))
    # this process's state stops at client event 4: event 9 is next all the same
    result = await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, batch(9))
    assert result.recorded == 4 and result.next_sequence == 13
    # what the other process recorded counts as recorded here (same content: duplicates)
    again = await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, batch(5))
    assert again.recorded == 0 and again.duplicates == 4
    await ingest_events(other, rec.artifacts, rec.evidence, run_id, batch(13))
    changed = [dict(turn(13), content="something else")]
    with pytest.raises(SequenceConflictError, match="event 13 is already recorded"):
        await ingest_events(
            rec.ledger,
            rec.artifacts,
            rec.evidence,
            run_id,
            IngestEventBatch.model_validate({"events": changed}).events,
        )
    events = await rec.ledger.events(run_id)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert (await rec.ledger.verify(run_id)).intact


async def test_a_refused_batch_drops_the_state(rec: Any) -> None:
    run_id = "cached-3"
    await start(rec, run_id)
    await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, batch(1))
    assert states_of(rec.ledger).take(run_id) is not None
    await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, batch(5))
    with pytest.raises(SequenceConflictError, match="out of order"):
        await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, batch(11))
    assert states_of(rec.ledger).take(run_id) is None
    # the next batch is judged on a state rebuilt from the ledger
    result = await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, batch(9))
    assert result.recorded == 4 and (await rec.ledger.verify(run_id)).intact


async def test_kept_state_records_the_same_contexts_as_a_rebuilt_one(rec: Any) -> None:
    from models import ContextSnapshot
    from models.evidence import context_message_refs

    for run_id in ("ctx-kept", "ctx-rebuilt"):
        await start(rec, run_id)
        for first in range(1, 1 + 4 * 6, 4):
            await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, batch(first))
            if run_id == "ctx-rebuilt":  # as if every batch went to another API process
                states_of(rec.ledger).take(run_id)
    kept = await rec.evidence.records(ContextSnapshot, "ctx-kept")
    rebuilt = await rec.evidence.records(ContextSnapshot, "ctx-rebuilt")
    assert len(kept) == 12

    def contexts(snapshots: list[ContextSnapshot]) -> list[tuple[tuple[str, ...], str]]:
        by_id = {s.snapshot_id: s for s in snapshots}
        return [(context_message_refs(s, by_id), s.content_hash) for s in snapshots]

    # the same messages and the same request hash, whichever process recorded them
    assert contexts(kept) == contexts(rebuilt)
    # the last model call saw the whole conversation: every message, in order
    assert len(contexts(kept)[-1][0]) == 23
    # a kept state lists only the new messages after the last snapshot's (the evidence of
    # a batch does not grow with the run); a rebuilt one starts again from the whole list
    assert [len(c.message_refs) for c in kept] == [1] + [2] * 11
    assert kept[-1].prefix_snapshot_id == kept[-2].snapshot_id
    assert kept[-1].prefix_messages == 21
    first_of_last_batch = rebuilt[-2]
    assert first_of_last_batch.prefix_snapshot_id is None
    assert len(first_of_last_batch.message_refs) == 21
    # both verify in full (lookup rows, referenced artifacts) and every call has its context
    for run_id in ("ctx-kept", "ctx-rebuilt"):
        verification = await rec.ledger.verify(run_id)
        assert verification.intact and not verification.problems
        completeness = await evidence_completeness(rec.ledger, rec.evidence, rec.artifacts, run_id)
        assert "context" in completeness.present


async def test_a_new_runs_state_is_the_one_read_back(rec: Any) -> None:
    from ingest.state import load_ingest_state
    from models.ingest import IngestTool

    run_id = "cached-new"
    header = IngestRunHeader(
        run_id=run_id,
        started_at=START,
        system_prompt="You answer.",
        tools=(IngestTool(name="lookup", side_effect_class="READ"),),
        labels={"agent": "x"},
    )
    await ingest_run(rec.ledger, rec.artifacts, header)
    kept = states_of(rec.ledger).take(run_id)
    assert kept is not None  # the first batch will not read the run back
    assert kept == await load_ingest_state(rec.ledger, rec.artifacts, run_id)
    result = await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, batch(1))
    assert result.recorded == 4 and (await rec.ledger.verify(run_id)).intact


async def test_a_context_whose_prefix_is_gone_is_missing_from_completeness(rec: Any) -> None:
    """Deleting one snapshot breaks every later one that continues it: completeness names
    each of those model calls as without a context, not only the deleted one's."""
    from models import ContextSnapshot
    from stores.sql import schema

    run_id = "ctx-broken"
    await start(rec, run_id)
    for first in range(1, 1 + 4 * 3, 4):
        await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, batch(first))
    snapshots = await rec.evidence.records(ContextSnapshot, run_id)
    assert len(snapshots) == 6 and snapshots[3].prefix_snapshot_id == snapshots[2].snapshot_id
    table = schema.context_snapshots
    async with rec.db.engine.begin() as conn:
        await conn.execute(table.delete().where(table.c.snapshot_id == snapshots[2].snapshot_id))
    completeness = await evidence_completeness(rec.ledger, rec.evidence, rec.artifacts, run_id)
    assert completeness.reasons["context"].startswith("4 of 6 model calls")

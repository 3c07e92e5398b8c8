"""A run started with its first events (``SqlLedger.start_run``, as ingestion starts every
run) is one round trip through the batch writer: the run's row, with the head its events make,
and the events in one transaction. Anything the fast path cannot write leaves nothing behind
and goes the general way, which decides what an existing run means."""

from __future__ import annotations

import uuid

import pytest

from models import ExecutionEventType, PromptArtifact, RunRecord
from models.errors import ConflictError, RunNotFoundError, SequenceConflictError
from stores.sql.database import Database
from stores.sql.ledger import NewEvent, SqlLedger
from tests.stores.test_write_behind import T0, Statements, event_, prompt_of_another_run

E = ExecutionEventType


def header(run_id: str, version: str = "1") -> RunRecord:
    return RunRecord(run_id=run_id, graph_id="g", graph_version=version, created_at=T0)


async def test_a_started_run_is_one_round_trip_and_verifies(
    ledger: SqlLedger, database: Database
) -> None:
    run_id = f"fast-{uuid.uuid4().hex[:10]}"
    watch = Statements(database)
    try:
        assert await ledger.start_run(header(run_id), [event_(i) for i in range(3)])
    finally:
        watch.close()
    assert watch.engine_sql == []  # no head read, no transaction through the pool
    assert len(watch.batches) == 1 and watch.commits == 1
    result = await ledger.verify(run_id)
    assert result.intact and result.head_sequence == 3
    assert (await ledger.get_run(run_id)).graph_version == "1"
    # the writer continues from the head it made: the next append is one round trip too
    watch = Statements(database)
    try:
        await ledger.append(run_id, event_(3))
    finally:
        watch.close()
    assert watch.engine_sql == [] and len(watch.batches) == 1
    assert (await ledger.verify(run_id)).head_sequence == 4


async def test_a_start_that_fails_after_its_run_row_leaves_no_run(
    ledger: SqlLedger, database: Database
) -> None:
    """The run's row is written first; a record of its events that is taken already (a prompt
    artifact id of another run) fails the transaction after it: nothing of the run stays."""
    prompt: PromptArtifact = await prompt_of_another_run(ledger, "taken")
    run_id = f"fast-{uuid.uuid4().hex[:10]}"
    events = [event_(0), NewEvent("s", E.PROMPT_COMPILED, T0, record=prompt)]
    with pytest.raises((ConflictError, SequenceConflictError)):
        await ledger.start_run(header(run_id), events)
    with pytest.raises(RunNotFoundError):
        await ledger.get_run(run_id)
    assert await ledger.start_run(header(run_id), [event_(0)])  # the id is still free
    assert (await ledger.verify(run_id)).head_sequence == 1


async def test_starting_an_existing_run_writes_nothing(ledger: SqlLedger) -> None:
    run_id = f"fast-{uuid.uuid4().hex[:10]}"
    assert await ledger.start_run(header(run_id), [event_(0), event_(1)])
    other = SqlLedger(ledger.db, ledger.artifacts)  # a writer that has not cached the head
    assert not await other.start_run(header(run_id), [event_(0), event_(1)])
    with pytest.raises(ConflictError, match="another header"):
        await other.start_run(header(run_id, version="2"), [event_(0)])
    result = await ledger.verify(run_id)
    assert result.intact and result.head_sequence == 2

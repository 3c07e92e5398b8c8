"""The ledger contract, run against SQLite and PostgreSQL (fixture ``database``)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import JsonValue
from sqlalchemy import delete, insert, select, text, update

from models import (
    ExecutionEventType,
    RunRecord,
    SideEffectRecord,
    SideEffectStatus,
    ToolFixture,
    ToolOutcome,
)
from models.canonical import canonical_hash
from models.chain import GENESIS_HASH, BreakReason, header_genesis
from models.errors import ConflictError, RunNotFoundError, SequenceConflictError
from stores.artifacts import LocalArtifactStore
from stores.sql import schema
from stores.sql.ledger import CAS_PREFIX, INLINE_REF, NewEvent, SqlLedger

T0 = datetime(2026, 8, 20, 10, 15, tzinfo=UTC)
E = ExecutionEventType


@pytest.fixture(params=[True, False], ids=["group-commit", "one-commit-each"])
def ledger(request, database, tmp_path) -> SqlLedger:
    return SqlLedger(
        database,
        LocalArtifactStore(tmp_path / "artifacts"),
        inline_limit=4096,
        group_commit=request.param,
    )


def new_run_id() -> str:
    return f"run-{uuid.uuid4().hex[:12]}"


async def make_run(ledger: SqlLedger, events: int = 0) -> str:
    run_id = new_run_id()
    await ledger.create_run(
        RunRecord(run_id=run_id, graph_id="g", graph_version="1", created_at=T0)
    )
    if events:
        await ledger.append_many(run_id, [payload_event(i) for i in range(events)])
    return run_id


def payload_event(i: int, step: str = "step") -> NewEvent:
    return NewEvent(f"{step}-{i}", E.MODEL_CALL, T0 + timedelta(seconds=i), payload={"i": i})


async def test_append_and_verify_intact(ledger: SqlLedger) -> None:
    run_id = await make_run(ledger)
    first = await ledger.append(run_id, payload_event(0))
    # the first event links to the run header (models.chain.header_genesis)
    header = (await ledger.get_run(run_id)).model_dump(mode="json")
    assert first.sequence == 1 and first.previous_hash == header_genesis(header) != GENESIS_HASH
    rest = await ledger.append_many(run_id, [payload_event(i) for i in range(1, 5)])
    assert [e.sequence for e in rest] == [2, 3, 4, 5]
    assert rest[0].previous_hash == first.hash
    result = await ledger.verify(run_id)
    assert result.intact and result.event_count == 5 and result.head_hash == rest[-1].hash
    stored = await ledger.events(run_id)
    assert [e.hash for e in stored] == [first.hash] + [e.hash for e in rest]
    assert stored[2].logical_time == T0 + timedelta(seconds=2)
    assert stored[2].payload_ref == INLINE_REF


async def test_empty_run_verifies_intact_at_genesis(ledger: SqlLedger) -> None:
    run_id = await make_run(ledger)
    result = await ledger.verify(run_id)
    header = (await ledger.get_run(run_id)).model_dump(mode="json")
    assert result.intact and result.event_count == 0 and result.head_hash == header_genesis(header)


async def test_conditional_append_refuses_a_stale_sequence(ledger: SqlLedger) -> None:
    run_id = await make_run(ledger, events=3)
    with pytest.raises(
        SequenceConflictError, match="expected sequence 3 but the next sequence is 4"
    ):
        await ledger.append(run_id, payload_event(9), expected_sequence=3)
    appended = await ledger.append(run_id, payload_event(9), expected_sequence=4)
    assert appended.sequence == 4
    assert (await ledger.verify(run_id)).event_count == 4


async def test_unknown_run_and_conflicting_header(ledger: SqlLedger) -> None:
    with pytest.raises(RunNotFoundError, match="run not found"):
        await ledger.append("no-such-run", payload_event(0))
    with pytest.raises(RunNotFoundError):
        await ledger.verify("no-such-run")
    run_id = await make_run(ledger)
    same = RunRecord(run_id=run_id, graph_id="g", graph_version="1", created_at=T0)
    await ledger.create_run(same)  # idempotent
    with pytest.raises(ConflictError, match="another header"):
        await ledger.create_run(same.model_copy(update={"graph_version": "2"}))
    assert (await ledger.get_run(run_id)).graph_version == "1"


async def test_concurrent_writers_never_fork_the_chain(ledger: SqlLedger) -> None:
    run_id = await make_run(ledger)

    async def writer(w: int) -> None:
        for i in range(10):
            await ledger.append(run_id, payload_event(i, step=f"w{w}"))

    await asyncio.gather(*(writer(w) for w in range(12)))
    result = await ledger.verify(run_id)
    assert result.intact, result.summary()
    events = await ledger.events(run_id)
    assert [e.sequence for e in events] == list(range(1, 121))
    assert len({e.previous_hash for e in events}) == 120  # every link has exactly one child


async def test_concurrent_conditional_appends_only_one_wins(ledger: SqlLedger) -> None:
    run_id = await make_run(ledger, events=2)
    results = await asyncio.gather(
        *(ledger.append(run_id, payload_event(100 + k), expected_sequence=3) for k in range(8)),
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, Exception)]
    losers = [r for r in results if isinstance(r, Exception)]
    assert len(winners) == 1
    assert all(isinstance(r, SequenceConflictError) for r in losers)
    assert (await ledger.verify(run_id)).event_count == 3


async def test_large_payload_goes_to_the_artifact_store(ledger: SqlLedger) -> None:
    run_id = await make_run(ledger)
    big: JsonValue = {"blob": "x" * 10_000}
    event = await ledger.append(run_id, NewEvent("s", E.ARTIFACT, T0, payload=big))
    assert event.payload_ref == CAS_PREFIX + event.payload_hash
    assert await ledger.payload(event) == b'{"blob":"' + b"x" * 10_000 + b'"}'
    assert (await ledger.verify(run_id)).intact


async def test_records_are_projected_in_the_same_transaction(ledger: SqlLedger, database) -> None:
    run_id = await make_run(ledger)
    fixture = ToolFixture(
        tool_call_id="call-1",
        capability_id="crm.lookup",
        request_hash=canonical_hash({"name": "crm.lookup", "arguments": {"id": 1}}),
        sanitized_request={"id": 1},
        sanitized_response={"name": "Ada"},
        outcome=ToolOutcome.SUCCESS,
        started_at=T0,
        run_id=run_id,
    )
    effect = SideEffectRecord(
        side_effect_id=f"{run_id}-se",
        run_id=run_id,
        step_id="pay",
        capability_id="payment.refund",
        idempotency_key=f"{run_id}-key",
        action_hash=canonical_hash({"refund": 10}),
        status=SideEffectStatus.PLANNED,
    )
    await ledger.append(run_id, NewEvent("crm", E.TOOL_CALL, T0, record=fixture))
    await ledger.append(run_id, NewEvent("pay", E.SIDE_EFFECT, T0, record=effect))
    unknown = effect.model_copy(update={"status": SideEffectStatus.UNKNOWN})
    await ledger.append(run_id, NewEvent("pay", E.SIDE_EFFECT, T0, record=unknown))
    async with database.read() as conn:
        fx = (
            await conn.execute(
                select(schema.tool_fixtures).where(schema.tool_fixtures.c.run_id == run_id)
            )
        ).one()
        se = (
            await conn.execute(
                select(schema.side_effects).where(schema.side_effects.c.run_id == run_id)
            )
        ).one()
    assert fx.request_hash == fixture.request_hash
    assert ToolFixture.model_validate(fx.record) == fixture
    assert se.status == "UNKNOWN"
    assert SideEffectRecord.model_validate(se.record) == unknown
    assert (await ledger.verify(run_id)).event_count == 3


async def test_a_failed_projection_records_nothing(ledger: SqlLedger) -> None:
    run_id = await make_run(ledger)
    other = await make_run(ledger)
    effect = SideEffectRecord(
        side_effect_id=f"{run_id}-se",
        run_id=run_id,
        step_id="pay",
        capability_id="payment.refund",
        idempotency_key=f"{run_id}-key",
        action_hash=canonical_hash({"refund": 10}),
        status=SideEffectStatus.PLANNED,
    )
    await ledger.append(run_id, NewEvent("pay", E.SIDE_EFFECT, T0, record=effect))
    with pytest.raises(ConflictError, match="already recorded for run"):
        await ledger.append(other, NewEvent("pay", E.SIDE_EFFECT, T0, record=effect))
    assert (await ledger.verify(other)).event_count == 0
    assert await ledger.events(other) == []


# tampering directly in SQL -------------------------------------------------------------------


async def _exec(database, statement) -> None:
    async with database.transaction() as conn:
        await conn.execute(statement)


ev = schema.execution_events


async def test_sql_edit_of_payload_hash_is_detected(ledger: SqlLedger, database) -> None:
    run_id = await make_run(ledger, events=5)
    forged = canonical_hash({"forged": True})
    await _exec(
        database,
        update(ev).where(ev.c.run_id == run_id, ev.c.sequence == 3).values(payload_hash=forged),
    )
    result = await ledger.verify(run_id)
    assert not result.intact and result.broken_at == 3
    assert result.reason is BreakReason.PAYLOAD_HASH_MISMATCH


async def test_sql_edit_of_payload_bytes_is_detected(ledger: SqlLedger, database) -> None:
    run_id = await make_run(ledger, events=5)
    await _exec(
        database,
        update(ev).where(ev.c.run_id == run_id, ev.c.sequence == 2).values(payload=b'{"i":99}'),
    )
    result = await ledger.verify(run_id)
    assert (result.broken_at, result.reason) == (2, BreakReason.PAYLOAD_HASH_MISMATCH)


async def test_sql_edit_of_metadata_is_detected(ledger: SqlLedger, database) -> None:
    run_id = await make_run(ledger, events=5)
    await _exec(
        database,
        update(ev).where(ev.c.run_id == run_id, ev.c.sequence == 4).values(step_id="other"),
    )
    result = await ledger.verify(run_id)
    assert (result.broken_at, result.reason) == (4, BreakReason.HASH_MISMATCH)


async def test_sql_edit_of_logical_time_is_detected(ledger: SqlLedger, database) -> None:
    run_id = await make_run(ledger, events=5)
    moved = T0 + timedelta(hours=1)
    await _exec(
        database,
        update(ev).where(ev.c.run_id == run_id, ev.c.sequence == 5).values(logical_time=moved),
    )
    result = await ledger.verify(run_id)
    assert (result.broken_at, result.reason) == (5, BreakReason.HASH_MISMATCH)


async def test_sql_delete_in_the_middle_is_a_gap(ledger: SqlLedger, database) -> None:
    run_id = await make_run(ledger, events=5)
    await _exec(database, delete(ev).where(ev.c.run_id == run_id, ev.c.sequence == 3))
    result = await ledger.verify(run_id)
    assert (result.broken_at, result.reason) == (3, BreakReason.GAP)


async def test_sql_delete_of_the_tail_is_detected(ledger: SqlLedger, database) -> None:
    run_id = await make_run(ledger, events=5)
    await _exec(database, delete(ev).where(ev.c.run_id == run_id, ev.c.sequence == 5))
    result = await ledger.verify(run_id)
    assert (result.broken_at, result.reason) == (5, BreakReason.HEAD_MISMATCH)


async def test_sql_insert_after_the_head_is_detected(ledger: SqlLedger, database) -> None:
    run_id = await make_run(ledger, events=3)
    last = (await ledger.events(run_id))[-1]
    row = last.model_dump() | {
        "sequence": 4,
        "event_id": str(uuid.uuid4()),
        "previous_hash": last.hash,
    }
    row.pop("schema_version")
    await _exec(database, insert(ev).values(**row, schema_version=1, payload=None))
    result = await ledger.verify(run_id)
    assert not result.intact and result.broken_at == 4


async def test_sql_reordering_is_detected(ledger: SqlLedger, database) -> None:
    run_id = await make_run(ledger, events=5)
    # swap sequences 2 and 3 through a free number, as an attacker would
    where = ev.c.run_id == run_id
    await _exec(database, update(ev).where(where, ev.c.sequence == 2).values(sequence=1000))
    await _exec(database, update(ev).where(where, ev.c.sequence == 3).values(sequence=2))
    await _exec(database, update(ev).where(where, ev.c.sequence == 1000).values(sequence=3))
    result = await ledger.verify(run_id)
    assert (result.broken_at, result.reason) == (2, BreakReason.REORDERED)


async def test_tampering_one_run_leaves_others_intact(ledger: SqlLedger, database) -> None:
    a = await make_run(ledger, events=3)
    b = await make_run(ledger, events=3)
    await _exec(
        database, update(ev).where(ev.c.run_id == a, ev.c.sequence == 1).values(type="RUN_FAILED")
    )
    assert not (await ledger.verify(a)).intact
    assert (await ledger.verify(b)).intact


async def test_migrations_are_idempotent(database) -> None:
    from stores.sql.database import upgrade_schema

    await upgrade_schema(database)
    async with database.read() as conn:
        version = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar_one()
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from stores.sql.database import MIGRATIONS_DIR

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    assert version == ScriptDirectory.from_config(config).get_current_head()


async def test_large_payloads_on_s3_verify_and_read_back(database, s3_artifact_store) -> None:
    ledger = SqlLedger(database, s3_artifact_store, inline_limit=1024)
    run_id = await make_run(ledger)
    event = await ledger.append(
        run_id, NewEvent("s", E.ARTIFACT, T0, payload={"csv": "a,b\n" * 2000})
    )
    assert event.payload_ref.startswith(CAS_PREFIX)
    assert await s3_artifact_store.exists(event.payload_hash)
    assert (await ledger.payload(event)).startswith(b'{"csv":"a,b\\n')
    assert (await ledger.verify(run_id)).intact


async def test_group_commit_shares_transactions_and_isolates_failures(database, tmp_path) -> None:
    ledger = SqlLedger(database, LocalArtifactStore(tmp_path / "a"), group_commit=True)
    runs = [await make_run(ledger) for _ in range(20)]
    batches: list[int] = []
    write_batch = ledger._write_batch

    async def counting(requests):
        batches.append(len(requests))
        return await write_batch(requests)

    ledger._committer._write_batch = counting  # type: ignore[union-attr]
    appends = [ledger.append(r, payload_event(i)) for r in runs for i in range(5)]
    appends.append(ledger.append("run-that-does-not-exist", payload_event(0)))
    results = await asyncio.gather(*appends, return_exceptions=True)
    assert isinstance(results[-1], RunNotFoundError)
    assert all(not isinstance(r, Exception) for r in results[:-1])
    assert sum(1 for b in batches if b > 1) >= 1  # appenders did share transactions
    for run_id in runs:
        verified = await ledger.verify(run_id)
        assert verified.intact and verified.event_count == 5

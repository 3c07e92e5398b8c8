"""The full check's fast path (the chain read as joined chunks, the events handed over chunk by
chunk, the lookup rows read one row a table and compared column by column) agrees with its
general path (rows read one per event, ``models.chain.verify_chain``): the same events, and the
same verification, checked counts and problems, intact or tampered. On SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from models.chain import ChainVerification
from models.verification import ChainedEvents, chained_events, joined_events
from stores.sql import chain_read, ledger_reads, schema
from stores.sql.chain_read import fetch_lookup_rows, verify_intact_chain
from stores.sql.ledger import _chain_row
from stores.sql.run_check import PROJECTION_RULES
from tests.tamper.conftest import Recorded


@pytest.fixture(params=[2, chain_read.CHUNK_EVENTS], ids=["chunks-of-2", "one-chunk"])
def chunk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(chain_read, "CHUNK_EVENTS", request.param)
    return int(request.param)


def _columns(events: ChainedEvents) -> dict[str, list[Any]]:
    payloads = [None if p is None else bytes(p) for p in events.payloads]
    return {
        "sequences": list(events.sequences),
        "event_ids": list(events.event_ids),
        "types": list(events.types),
        "payload_refs": list(events.payload_refs),
        "payload_hashes": list(events.payload_hashes),
        "hashes": list(events.hashes),
        "payloads": payloads,
    }


async def test_the_events_handed_over_by_chunk_are_the_stored_ones(
    recorded: Recorded, chunk: int
) -> None:
    parts: list[ChainedEvents] = []
    async with recorded.database.read() as conn:
        chain = await verify_intact_chain(conn, recorded.run_id, on_events=parts.append)
        e = schema.execution_events.c
        rows = (
            await conn.execute(
                select(schema.execution_events)
                .where(e.run_id == recorded.run_id)
                .order_by(e.sequence)
            )
        ).all()
    assert chain is not None and chain.intact
    assert len(parts) == (recorded.events + chunk - 1) // chunk
    stored = chained_events([_chain_row(row) for row in rows])
    assert _columns(joined_events(parts)) == _columns(stored)
    # one event's payload is in the artifact store: no inline payload, a ``cas:`` reference
    assert sum(p is None for p in stored.payloads) == 1


async def _both_paths(
    recorded: Recorded, monkeypatch: pytest.MonkeyPatch
) -> tuple[ChainVerification, ChainVerification]:
    fast = await recorded.ledger.verify(recorded.run_id)

    async def declined(*args: object, **kwargs: object) -> None:
        return None

    with monkeypatch.context() as patched:
        patched.setattr(ledger_reads, "verify_intact_chain", declined)
        general = await recorded.ledger.verify(recorded.run_id)
    return fast, general


async def test_an_intact_run_verifies_alike_on_both_paths(
    recorded: Recorded, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, general = await _both_paths(recorded, monkeypatch)
    assert fast.intact and fast == general
    assert fast.checked == {
        "payloads": recorded.events,
        "artifacts": 2,
        "projections": 6,
        "anchors": 1,
        "raw_payloads": 0,
    }


@pytest.mark.parametrize(
    "statement",
    [
        # a looked-up column, the sequence, the content hash, the record: each compared
        "UPDATE side_effects SET status='FAILED' WHERE run_id=:r",
        "UPDATE approvals SET sequence = sequence + 1 WHERE run_id=:r",
        "UPDATE policy_decisions SET content_hash=:h WHERE run_id=:r",
        "UPDATE approvals SET record = '[1]' WHERE run_id=:r",
        "UPDATE checkpoints SET sequence = 3 WHERE run_id=:r",
        # a row missing, a row no event recorded
        "DELETE FROM approvals WHERE run_id=:r",
        "UPDATE policy_decisions SET decision_id = decision_id || '-x' WHERE run_id=:r",
    ],
)
async def test_a_tampered_lookup_row_is_named_alike_on_both_paths(
    recorded: Recorded, chunk: int, monkeypatch: pytest.MonkeyPatch, statement: str
) -> None:
    await recorded.sql(statement, r=recorded.run_id, h="sha256:" + "3" * 64)
    fast, general = await _both_paths(recorded, monkeypatch)
    assert not fast.intact and fast.problems
    assert fast == general


async def test_a_tampered_artifact_is_named_alike_on_both_paths(
    recorded: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded.artifact_path(recorded.big_payload).unlink()
    recorded.artifact_path(recorded.state_ref).write_bytes(b"{}")
    fast, general = await _both_paths(recorded, monkeypatch)
    assert not fast.intact and len(fast.problems) >= 2
    assert fast == general


# SQLite keeps any type in any column: a BLOB that JSON cannot hold fails the one-row-a-table
# read, which then reads the rows one by one
@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_lookup_rows_read_one_row_a_table_are_the_rows(recorded: Recorded) -> None:
    columns = {rule.table: (rule.key_column, *rule.compared) for rule in PROJECTION_RULES}

    async def read(aggregated: bool) -> dict[str, list[Any]]:
        async with recorded.database.read() as conn:
            raw = await conn.get_raw_connection()
            return await chain_read._sqlite_lookup_rows(
                raw.driver_connection, columns, recorded.run_id, aggregated=aggregated
            )

    assert await read(True) == await read(False)
    # a record that is a number, one beyond orjson's integers
    # (not a checkpoint's: another test edits every checkpoint record of the shared database)
    await recorded.sql("UPDATE approvals SET record = 12 WHERE run_id=:r", r=recorded.run_id)
    await recorded.sql(
        "UPDATE side_effects SET status = 7, record = '{\"n\": 123456789012345678901234567890}'"
        " WHERE run_id=:r",
        r=recorded.run_id,
    )
    one_row = await read(True)
    assert one_row == await read(False)
    assert one_row["approvals"][-1] == [12]
    assert sum(len(rows[0]) for rows in one_row.values()) == 6
    # a record that is not JSON: read as stored (a text), one by one
    await recorded.sql(
        "UPDATE approvals SET record = 'not json' WHERE run_id=:r", r=recorded.run_id
    )
    with pytest.raises(chain_read._NotJson):
        await read(True)
    async with recorded.database.read() as conn:
        fetched = await fetch_lookup_rows(conn, columns, recorded.run_id)
    assert fetched == await read(False)
    assert fetched["approvals"][-1] == ["not json"]
    await recorded.sql(
        "UPDATE tool_fixtures SET outcome = CAST(outcome AS BLOB) WHERE run_id=:r",
        r=recorded.run_id,
    )
    async with recorded.database.read() as conn:
        fetched = await fetch_lookup_rows(conn, columns, recorded.run_id)
    assert fetched == await read(False)
    assert isinstance(fetched["tool_fixtures"][4][0], bytes)


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_a_value_of_another_type_is_named_alike_on_both_paths(
    recorded: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    await recorded.sql(
        "UPDATE tool_fixtures SET outcome = CAST(outcome AS BLOB) WHERE run_id=:r",
        r=recorded.run_id,
    )
    fast, general = await _both_paths(recorded, monkeypatch)
    assert not fast.intact and "outcome" in str(fast.detail)
    assert fast == general

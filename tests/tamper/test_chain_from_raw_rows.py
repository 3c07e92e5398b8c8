"""The fast chain check from raw rows (``stores.sql.chain_read``) agrees with the general
path: it vouches for every intact chain it can write from its template, and for anything
tampered (or beyond its template) it answers None, so ``verify(full=False)`` gives the general
path's diagnosis. On SQLite and on PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest

from models import ExecutionEventType as E
from models.base import format_instant
from models.chain import CHAIN_SCHEMA_VERSION, BreakReason, link_hash
from stores.sql import chain_read
from stores.sql.chain_read import verify_intact_chain
from stores.sql.ledger import NewEvent
from tests.tamper.conftest import T0, Recorded

EVENTS = "execution_events"
#: a copy of event 3 added at ``:s`` (the run header unchanged)
_EXTRA_ROW = (
    "INSERT INTO {t} (run_id, sequence, event_id, step_id, type, payload_ref, payload_hash,"
    " previous_hash, hash, logical_time, recorded_at, schema_version, payload)"
    " SELECT run_id, :s, event_id || '-copy', step_id, type, payload_ref, payload_hash,"
    " previous_hash, hash, logical_time, recorded_at, schema_version, payload"
    " FROM {t} WHERE run_id=:r AND sequence=3"
)


async def _fast(rec: Recorded) -> object:
    async with rec.database.read() as conn:
        return await verify_intact_chain(conn, rec.run_id)


@pytest.fixture(params=[2, chain_read.CHUNK_EVENTS], ids=["chunks-of-2", "one-chunk"])
def chunk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Events per joined read: the run in several reads (the next read under way while one is
    checked) or in one."""
    monkeypatch.setattr(chain_read, "CHUNK_EVENTS", request.param)
    return int(request.param)


async def test_an_intact_chain_verifies_from_raw_rows(recorded: Recorded, chunk: int) -> None:
    fast = await _fast(recorded)
    general = await recorded.ledger.verify(recorded.run_id)
    assert fast is not None
    assert fast == (await recorded.ledger.verify(recorded.run_id, full=False))
    assert (fast.intact, fast.event_count, fast.head_hash) == (
        True,
        general.event_count,
        general.head_hash,
    )


async def test_texts_beyond_the_template_take_the_general_path(recorded: Recorded) -> None:
    # quotes, backslashes, control characters and non-ASCII text need escaping or NFC: the
    # template cannot write them, so the fast check declines and the general path verifies
    for step in ('say "hi"', "back\\slash", "tab\there", "café"):
        await recorded.ledger.append(
            recorded.run_id, NewEvent(step, E.MODEL_CALL, T0, payload={"s": step})
        )
        assert await _fast(recorded) is None
        assert (await recorded.ledger.verify(recorded.run_id, full=False)).intact


@pytest.mark.parametrize(
    ("statement", "params", "reason"),
    [
        ("UPDATE {t} SET step_id='other' WHERE run_id=:r AND sequence=4", {}, "event hash"),
        ("DELETE FROM {t} WHERE run_id=:r AND sequence=3", {}, "gap"),
        ("UPDATE {t} SET hash=:h WHERE run_id=:r AND sequence=6", {"h": "sha256:" + "2" * 64}, ""),
        ("UPDATE {t} SET payload=:p WHERE run_id=:r AND sequence=1", {"p": b"{}"}, "payload"),
        (
            "UPDATE {t} SET event_id=event_id || :e WHERE run_id=:r AND sequence=2",
            {"e": 'x","a":"'},
            "event",
        ),
        # rows outside every range read: before the first, after the head
        ("UPDATE {t} SET sequence=0 WHERE run_id=:r AND sequence=1", {}, "duplicate"),
        ("UPDATE {t} SET sequence=-3 WHERE run_id=:r AND sequence=1", {}, "duplicate"),
        ("UPDATE {t} SET sequence=100000 WHERE run_id=:r AND sequence=5", {}, "gap"),
        (_EXTRA_ROW, {"s": 100000}, "gap"),
        # a separator of the joined texts inside a value
        ("UPDATE {t} SET hash=',' || substr(hash, 2) WHERE run_id=:r AND sequence=3", {}, ""),
        (
            "UPDATE {t} SET previous_hash=substr(previous_hash, 1, 70) || ','"
            " WHERE run_id=:r AND sequence=4",
            {},
            "",
        ),
        ("UPDATE {t} SET step_id=step_id || :n WHERE run_id=:r AND sequence=5", {"n": "\n"}, ""),
    ],
)
async def test_tampering_is_left_to_the_general_path(
    recorded: Recorded, chunk: int, statement: str, params: dict[str, object], reason: str
) -> None:
    await recorded.sql(statement.format(t=EVENTS), r=recorded.run_id, **params)
    assert await _fast(recorded) is None
    result = await recorded.ledger.verify(recorded.run_id, full=False)
    assert not result.intact
    assert reason in str(result.reason)


async def test_an_edited_instant_is_left_to_the_general_path(recorded: Recorded) -> None:
    events = await recorded.ledger.events(recorded.run_id)
    await recorded.sql(
        f"UPDATE {EVENTS} SET logical_time=:t WHERE run_id=:r AND sequence=3",
        t=events[2].logical_time + timedelta(microseconds=1),
        r=recorded.run_id,
    )
    assert await _fast(recorded) is None
    result = await recorded.ledger.verify(recorded.run_id, full=False)
    assert result.reason is BreakReason.HASH_MISMATCH and result.broken_at == 3


# PostgreSQL stores instants typed: only SQLite can hold an instant in another form
@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_a_hash_forged_over_an_unwritable_instant_is_left_to_the_general_path(
    recorded: Recorded,
) -> None:
    # The database writes NULL (or an instant not in the stored form) into the text as a
    # backslash, never as nothing: a hash forged over an empty instant must not verify.
    events = await recorded.ledger.events(recorded.run_id)
    last = events[-1]
    metadata: dict[str, str | int] = {
        "event_id": last.event_id,
        "logical_time": "",
        "payload_ref": last.payload_ref,
        "recorded_at": format_instant(last.recorded_at),
        "run_id": last.run_id,
        "schema_version": CHAIN_SCHEMA_VERSION,
        "sequence": last.sequence,
        "step_id": last.step_id,
        "type": str(last.type),
    }
    forged = link_hash(last.previous_hash, metadata, last.payload_hash)
    await recorded.sql(
        f"UPDATE {EVENTS} SET logical_time='2026-11-03 09:00:00', hash=:h "
        "WHERE run_id=:r AND sequence=:s",
        h=forged,
        r=recorded.run_id,
        s=last.sequence,
    )
    await recorded.sql("UPDATE runs SET head_hash=:h WHERE run_id=:r", h=forged, r=recorded.run_id)
    assert await _fast(recorded) is None
    result = await recorded.ledger.verify(recorded.run_id, full=False)
    assert not result.intact and result.broken_at == last.sequence


# SQLite keeps any type in any column; PostgreSQL refuses another type
@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE {t} SET hash=CAST(hash AS BLOB) WHERE run_id=:r AND sequence=3",
        "UPDATE {t} SET previous_hash=CAST(previous_hash AS BLOB) WHERE run_id=:r AND sequence=3",
        "UPDATE {t} SET payload_hash=CAST(payload_hash AS BLOB) WHERE run_id=:r AND sequence=1",
        "UPDATE {t} SET payload=CAST(payload AS TEXT) WHERE run_id=:r AND sequence=1",
        "UPDATE {t} SET sequence=CAST(sequence AS BLOB) WHERE run_id=:r AND sequence=9",
        "UPDATE {t} SET sequence='x' WHERE run_id=:r AND sequence=9",
        _EXTRA_ROW.replace(":s", "'x'"),
        # the fields of the chained text, which the joins would read as the same text too
        "UPDATE {t} SET event_id=CAST(event_id AS BLOB) WHERE run_id=:r AND sequence=2",
        "UPDATE {t} SET type=CAST(type AS BLOB) WHERE run_id=:r AND sequence=2",
        "UPDATE {t} SET logical_time=CAST(logical_time AS BLOB) WHERE run_id=:r AND sequence=2",
        "UPDATE {t} SET schema_version=CAST(schema_version AS BLOB) WHERE run_id=:r AND sequence=2",
    ],
)
async def test_values_of_another_type_are_left_to_the_general_path(
    recorded: Recorded, chunk: int, statement: str
) -> None:
    # the joined texts would read these as the same text: the row's types are checked too
    await recorded.sql(statement.format(t=EVENTS), r=recorded.run_id)
    assert await _fast(recorded) is None


# PostgreSQL keeps its NOT NULL only while the owner leaves it
@pytest.mark.parametrize("database", ["postgresql"], indirect=True)
@pytest.mark.parametrize("column", ["step_id", "payload_ref"])
async def test_a_null_does_not_make_up_for_a_separator(recorded: Recorded, column: str) -> None:
    # A NULL left out of a join, and the value it held appended to the one before with the
    # separator: the join reads as before. The database writes the NULL as a backslash.
    try:
        await recorded.sql(f"ALTER TABLE {EVENTS} ALTER COLUMN {column} DROP NOT NULL")
        await recorded.sql(
            f"UPDATE {EVENTS} AS e SET {column} = e.{column} || E'\\n' || n.{column}"
            f" FROM {EVENTS} AS n WHERE e.run_id=:r AND n.run_id=:r AND e.sequence=3"
            " AND n.sequence=4",
            r=recorded.run_id,
        )
        await recorded.sql(
            f"UPDATE {EVENTS} SET {column}=NULL WHERE run_id=:r AND sequence=4", r=recorded.run_id
        )
        assert await _fast(recorded) is None
    finally:  # the schema as the other tests of this session's database expect it
        await recorded.sql(
            f"UPDATE {EVENTS} SET {column}='x' WHERE run_id=:r AND {column} IS NULL",
            r=recorded.run_id,
        )
        await recorded.sql(f"ALTER TABLE {EVENTS} ALTER COLUMN {column} SET NOT NULL")

"""``verify_chain``'s in-line check of the usual event gives the verdicts of the check of every
event by ``_first_problem`` (the loop before it), byte for byte, whatever the rows hold."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta, timezone
from enum import Enum
from typing import Any

import pytest

from models.canonical import canonicalize
from models.chain import (
    GENESIS_HASH,
    HEADER_REWRITTEN,
    BreakReason,
    ChainRow,
    ChainVerification,
    _broken,
    _first_problem,
    _utc_link_hash,
    link_hash_of,
    row_hash,
    verify_chain,
)
from models.digest import sha256_digest
from models.enums import ExecutionEventType

T0 = datetime(2026, 8, 20, 10, 15, tzinfo=UTC)


def reference_verify(
    run_id: str,
    rows: list[ChainRow],
    *,
    expected_head: tuple[int, str] | None = None,
    genesis: str = GENESIS_HASH,
) -> ChainVerification:
    """``verify_chain`` as it was before the in-line check: ``_first_problem`` on every row."""
    seen_hashes = {row.hash: row.sequence for row in rows}
    running, chained = genesis, None
    if genesis != GENESIS_HASH:
        first = rows[0].previous_hash if rows and rows[0].sequence == 1 else None
        if first == GENESIS_HASH or (not rows and expected_head == (0, GENESIS_HASH)):
            running, chained = GENESIS_HASH, (False if rows else None)
        elif first is not None and first != genesis:
            return _broken(run_id, 0, genesis, 1, BreakReason.HEADER, HEADER_REWRITTEN)
        elif first is not None:
            chained = True
    expected = 1
    for row in rows:
        broken = _first_problem(run_id, row, expected, running, seen_hashes)
        if broken is not None:
            reason, detail = broken
            at = min(row.sequence, expected) if reason is BreakReason.GAP else row.sequence
            return _broken(run_id, expected - 1, running, at, reason, detail)
        running = row.hash
        expected += 1
    count = expected - 1
    if expected_head is not None and expected_head != (count, running):
        head_seq, head_hash = expected_head
        at = min(head_seq, count) + 1 if head_seq != count else count
        detail = (
            f"run header records head {head_seq} ({head_hash}) but the chain ends at "
            f"{count} ({running}): events were deleted or appended outside the ledger"
        )
        return _broken(run_id, count, running, at, BreakReason.HEAD_MISMATCH, detail)
    return ChainVerification(
        run_id=run_id,
        intact=True,
        event_count=count,
        head_sequence=count,
        head_hash=running,
        header_chained=chained,
    )


def chain(n: int, *, genesis: str = GENESIS_HASH, **fields: Any) -> list[ChainRow]:
    rows, previous = [], genesis
    for i in range(1, n + 1):
        payload = canonicalize({"i": i})
        row = ChainRow(
            run_id="run-1",
            sequence=i,
            event_id=f"e-{i}",
            step_id=f"s-{i}",
            type="MODEL_CALL",
            payload_ref="inline",
            payload_hash=sha256_digest(payload),
            previous_hash=previous,
            hash="",
            logical_time=T0 + timedelta(seconds=i, microseconds=i * 7919 % 1_000_000),
            recorded_at=T0 + timedelta(days=1, microseconds=i),
            payload=payload,
        )
        row = dataclasses.replace(row, **fields)
        row = dataclasses.replace(row, hash=row_hash(row, previous))
        rows.append(row)
        previous = row.hash
    return rows


class OldStyle(str, Enum):  # noqa: UP042 - str() is "OldStyle.CALL", its text "CALL"
    CALL = "CALL"


PLUS_TWO = timezone(timedelta(hours=2))

#: rows the in-line hash must hash as ``row_hash`` does, or leave to it (None)
ODD_FIELDS: list[dict[str, Any]] = [
    {},
    {"logical_time": datetime(1, 1, 1, tzinfo=UTC)},
    {"logical_time": datetime(999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)},
    {"logical_time": datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)},
    {"recorded_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)},  # no microseconds
    {"recorded_at": datetime(2026, 1, 2, 3, 4, 5, 1, tzinfo=UTC)},
    {"logical_time": datetime(2026, 1, 2, 3, 4, 5, tzinfo=PLUS_TWO)},
    {"recorded_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(0)))},
    {"step_id": "Cafe\u0301 \U0001f600"},
    {"event_id": 'a"b'},
    {"run_id": "back\\slash"},
    {"payload_ref": "tab\there"},
    {"step_id": ""},
    {"type": ExecutionEventType.TOOL_CALL},
    {"type": OldStyle.CALL},
    {"schema_version": 2},
    {"schema_version": True},
    {"payload_hash": 'sha256:"quoted"'},
    {"payload_hash": "not a digest at all\n"},
]


@pytest.mark.parametrize("fields", ODD_FIELDS)
def test_the_inline_hash_is_row_hash_or_leaves_the_row_to_it(fields: dict[str, Any]) -> None:
    for previous in (GENESIS_HASH, 'x"y', "\x00"):
        row = dataclasses.replace(chain(3)[2], **fields)
        fast = _utc_link_hash(row, previous)
        assert fast is None or fast == row_hash(row, previous), fields
    plain = chain(1)[0]
    # the usual row takes the in-line hash (else this test would prove nothing)
    assert _utc_link_hash(plain, GENESIS_HASH) == row_hash(plain, GENESIS_HASH)
    for sequence in (2**53, 2**53 - 1):
        big = dataclasses.replace(plain, sequence=sequence)
        fast = _utc_link_hash(big, GENESIS_HASH)
        assert fast is None or fast == row_hash(big, GENESIS_HASH)


def test_rows_of_every_odd_kind_verify_as_before() -> None:
    for fields in ODD_FIELDS:
        try:
            rows = chain(5, **fields)
        except UnicodeEncodeError:  # not a chain anyone can write
            continue
        for head in (None, (5, rows[-1].hash), (4, rows[3].hash)):
            assert verify_chain("run-1", rows, expected_head=head) == reference_verify(
                "run-1", rows, expected_head=head
            ), fields


def test_a_hash_that_is_not_ascii_fails_as_before() -> None:
    rows = chain(3)
    rows[1] = dataclasses.replace(rows[1], payload=None, payload_hash="sha256:é")
    with pytest.raises(UnicodeEncodeError):
        reference_verify("run-1", rows)
    with pytest.raises(UnicodeEncodeError):
        verify_chain("run-1", rows)


def _tamper(rows: list[ChainRow], rng: random.Random) -> list[ChainRow]:
    rows = list(rows)
    i = rng.randrange(len(rows))
    row = rows[i]
    kind = rng.randrange(15)
    if kind == 0:
        rows[i] = dataclasses.replace(row, payload_hash=sha256_digest(b"forged"))
    elif kind == 1:
        rows[i] = dataclasses.replace(row, payload=b'{"i":-1}')
    elif kind == 2:
        rows[i] = dataclasses.replace(row, step_id=row.step_id + "x")
    elif kind == 3:
        rows[i] = dataclasses.replace(row, previous_hash=sha256_digest(b"x"))
    elif kind == 4:
        rows[i] = dataclasses.replace(row, hash=sha256_digest(b"y"))
    elif kind == 5:
        rows[i] = dataclasses.replace(row, sequence=row.sequence + rng.choice((-1, 1, 5)))
    elif kind == 6:
        rows[i] = dataclasses.replace(row, run_id="run-2")
    elif kind == 7:
        del rows[i]
    elif kind == 8 and i + 1 < len(rows):
        rows[i], rows[i + 1] = rows[i + 1], rows[i]
    elif kind == 9:
        rows.insert(i, row)
    elif kind == 10:  # the same instant written in another zone: still verifies
        rows[i] = dataclasses.replace(row, recorded_at=row.recorded_at.astimezone(PLUS_TWO))
    elif kind == 11:
        rows[i] = dataclasses.replace(row, recorded_at=row.recorded_at + timedelta(microseconds=1))
    elif kind == 12:
        rows[i] = dataclasses.replace(row, type=ExecutionEventType.MODEL_CALL)  # same text
    elif kind == 13:
        rows[i] = dataclasses.replace(row, sequence=float(row.sequence))  # type: ignore[arg-type]
    elif i + 1 < len(rows):  # two events swapped, their sequences renumbered
        nxt = rows[i + 1]
        rows[i] = dataclasses.replace(nxt, sequence=row.sequence)
        rows[i + 1] = dataclasses.replace(row, sequence=nxt.sequence)
    return rows


def test_tampered_chains_get_the_verdicts_they_got_before() -> None:
    rng = random.Random(35)
    header = sha256_digest(b"replaybook:execution-chain:v2:header")
    verdicts = set()
    for trial in range(400):
        genesis = header if trial % 3 == 0 else GENESIS_HASH
        rows = chain(12, genesis=genesis)
        head = (12, rows[-1].hash)
        for _ in range(rng.choice((1, 1, 2, 3))):
            rows = _tamper(rows, rng)
        for expected_head in (None, head):
            ours = verify_chain("run-1", rows, expected_head=expected_head, genesis=genesis)
            before = reference_verify("run-1", rows, expected_head=expected_head, genesis=genesis)
            assert ours == before
            assert ours.model_dump_json() == before.model_dump_json()
            verdicts.add(ours.reason)
    # every way a chain breaks was met, and intact ones too
    assert verdicts >= {
        None,
        BreakReason.PAYLOAD_HASH_MISMATCH,
        BreakReason.HASH_MISMATCH,
        BreakReason.PREVIOUS_HASH_MISMATCH,
        BreakReason.GAP,
        BreakReason.DUPLICATE,
        BreakReason.REORDERED,
        BreakReason.FOREIGN_EVENT,
        BreakReason.HEAD_MISMATCH,
    }


@pytest.mark.parametrize("fields", ODD_FIELDS)
def test_link_hash_of_an_events_fields_is_row_hash(fields: dict[str, Any]) -> None:
    """What the ledger links an appended event with (``stores.sql.linking``)."""
    row = dataclasses.replace(chain(3)[2], **fields)
    for previous in (GENESIS_HASH, 'x"y'):
        linked = link_hash_of(
            previous,
            row.event_id,
            row.logical_time,
            row.payload_ref,
            row.recorded_at,
            row.run_id,
            row.schema_version,
            row.sequence,
            row.step_id,
            str(row.type),  # as the ledger passes it
            row.payload_hash,
        )
        assert linked == row_hash(dataclasses.replace(row, type=str(row.type)), previous)

"""The hash chain as pure functions: link rule, genesis, and each way a chain breaks."""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import UTC, datetime, timedelta

from models.canonical import canonicalize, canonicalize_flat
from models.chain import (
    GENESIS_HASH,
    BreakReason,
    ChainRow,
    chain_metadata,
    link_hash,
    row_hash,
    verify_chain,
)
from models.digest import sha256_digest

T0 = datetime(2026, 8, 20, 10, 15, tzinfo=UTC)


def build_chain(n: int, run_id: str = "run-1") -> list[ChainRow]:
    rows, previous = [], GENESIS_HASH
    for i in range(1, n + 1):
        payload = canonicalize({"i": i})
        row = ChainRow(
            run_id=run_id,
            sequence=i,
            event_id=f"e-{i}",
            step_id=f"s-{i}",
            type="MODEL_CALL",
            payload_ref="inline",
            payload_hash=sha256_digest(payload),
            previous_hash=previous,
            hash="",
            logical_time=T0 + timedelta(seconds=i),
            recorded_at=T0 + timedelta(days=1, microseconds=i),
            payload=payload,
        )
        row = dataclasses.replace(row, hash=row_hash(row, previous))
        rows.append(row)
        previous = row.hash
    return rows


def test_genesis_is_the_documented_constant() -> None:
    assert GENESIS_HASH == "sha256:" + hashlib.sha256(b"replaybook:execution-chain:v1").hexdigest()


def test_link_hash_is_sha256_of_previous_metadata_payload() -> None:
    row = ChainRow(
        run_id="r",
        sequence=1,
        event_id="e",
        step_id="s",
        type="RUN_STARTED",
        payload_ref="inline",
        payload_hash="",
        previous_hash=GENESIS_HASH,
        hash="",
        logical_time=T0,
        recorded_at=T0,
    )
    meta = chain_metadata(row)
    payload_hash = sha256_digest(b"{}")
    expected = hashlib.sha256(
        GENESIS_HASH.encode() + canonicalize(meta) + payload_hash.encode()
    ).hexdigest()
    assert link_hash(GENESIS_HASH, meta, payload_hash) == "sha256:" + expected
    assert canonicalize(meta).startswith(
        b'{"event_id":"e","logical_time":"2026-08-20T10:15:00.000000Z"'
    )
    # the hot-path emitter gives exactly the general canonical bytes, also for non-ASCII ids
    assert canonicalize_flat(meta) == canonicalize(meta)
    odd = chain_metadata(dataclasses.replace(row, step_id="Cafe\u0301 \U0001f600", run_id='a"b'))
    assert canonicalize_flat(odd) == canonicalize(odd)
    assert "Café".encode() in canonicalize_flat(odd)
    assert canonicalize_flat({"b": 1, "a": 2}) == b'{"a":2,"b":1}'
    assert canonicalize_flat({"a": True, "b": 2**60 // 2**10}) == canonicalize(
        {"a": True, "b": 2**50}
    )


def test_an_untouched_chain_is_intact() -> None:
    rows = build_chain(50)
    result = verify_chain("run-1", rows, expected_head=(50, rows[-1].hash))
    assert result.intact and result.event_count == 50 and result.head_hash == rows[-1].hash
    assert result.summary().startswith("intact: 50 events")


def test_each_kind_of_break_names_its_sequence_and_reason() -> None:
    rows = build_chain(6)
    head = (6, rows[-1].hash)

    def check(mutated: list[ChainRow], at: int, reason: BreakReason) -> None:
        result = verify_chain("run-1", mutated, expected_head=head)
        assert (result.intact, result.broken_at, result.reason) == (False, at, reason), result
        assert result.summary().startswith(f"broken at sequence {at}: {reason.value}")

    edited = list(rows)
    edited[2] = dataclasses.replace(rows[2], payload_hash=sha256_digest(b"forged"))
    check(edited, 3, BreakReason.PAYLOAD_HASH_MISMATCH)

    edited = list(rows)
    edited[3] = dataclasses.replace(rows[3], payload=b'{"i":999}')
    check(edited, 4, BreakReason.PAYLOAD_HASH_MISMATCH)

    edited = list(rows)
    edited[1] = dataclasses.replace(rows[1], step_id="elsewhere")
    check(edited, 2, BreakReason.HASH_MISMATCH)

    edited = list(rows)
    edited[4] = dataclasses.replace(rows[4], previous_hash=sha256_digest(b"x"))
    check(edited, 5, BreakReason.PREVIOUS_HASH_MISMATCH)

    check(rows[:3] + rows[4:], 4, BreakReason.GAP)
    check(rows[:5], 6, BreakReason.HEAD_MISMATCH)
    check([rows[0], rows[2], rows[1], *rows[3:]], 2, BreakReason.GAP)

    swapped = [
        rows[0],
        dataclasses.replace(rows[2], sequence=2),
        dataclasses.replace(rows[1], sequence=3),
        *rows[3:],
    ]
    check(swapped, 2, BreakReason.REORDERED)

    check([rows[0], rows[1], rows[1], *rows[2:]], 2, BreakReason.DUPLICATE)

    foreign = build_chain(6, run_id="run-2")
    check([rows[0], foreign[1], *rows[2:]], 2, BreakReason.FOREIGN_EVENT)


def test_content_can_be_destroyed_without_breaking_the_chain() -> None:
    rows = [dataclasses.replace(r, payload=None) for r in build_chain(5)]
    assert verify_chain("run-1", rows).intact

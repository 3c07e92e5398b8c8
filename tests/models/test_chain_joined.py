"""The chain check over joined columns (``models.chain_joined``) agrees with ``verify_chain`` on
an intact chain and answers None for anything else, whichever chunk it is in; the chained texts
it writes from the columns are the canonical bytes ``verify_chain`` hashes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from models.base import format_instant
from models.canonical import canonicalize_flat
from models.chain import GENESIS_HASH, ChainRow, chain_metadata, verify_chain
from models.chain_joined import (
    CHUNK_FIELDS,
    ChainChunk,
    chained_texts,
    joined_digests,
    split_payloads,
    verify_chain_chunks,
)
from models.digest import sha256_digest
from tests.models.test_chain import build_chain


def _stored(row: ChainRow, field: str) -> str:
    """A field as a store reads it (an instant in SQLite's stored form)."""
    value = getattr(row, field)
    if field in ("logical_time", "recorded_at"):
        return str(format_instant(value)[:-1].replace("T", " "))
    return str(value)


def _chunk(rows: list[ChainRow]) -> ChainChunk:
    """What a store's aggregate gives for ``rows``."""
    inline = [row for row in rows if row.payload is not None]
    return ChainChunk(
        count=len(rows),
        sequences=",".join(str(row.sequence) for row in rows),
        previous_hashes=",".join(row.previous_hash for row in rows),
        hashes=",".join(row.hash for row in rows),
        fields=["\n".join(_stored(row, field) for row in rows) for field in CHUNK_FIELDS],
        inline="".join("0" if row.payload is None else "1" for row in rows),
        payloads=[row.payload for row in inline if row.payload is not None],
    )


def _chunks(rows: list[ChainRow], size: int) -> list[ChainChunk]:
    return [_chunk(rows[i : i + size]) for i in range(0, len(rows), size)]


def _verify(chunks: list[ChainChunk], head: tuple[int, str]) -> object:
    return verify_chain_chunks("run-1", chunks, expected_head=head)


def _canonical_text(row: ChainRow) -> bytes:
    return (
        row.previous_hash.encode()
        + canonicalize_flat(chain_metadata(row))
        + (row.payload_hash.encode())
    )


def test_chained_texts_are_the_canonical_bytes() -> None:
    # the fast path's one join per event writes what verify_chain hashes, field for field
    rows = build_chain(5)
    values = [
        [_stored(row, field).encode().replace(b" ", b"T") for row in rows] for field in CHUNK_FIELDS
    ]
    texts = chained_texts(
        "run-1",
        [row.previous_hash.encode() for row in rows],
        [str(row.sequence).encode() for row in rows],
        values,
    )
    assert texts is not None
    assert list(texts) == [_canonical_text(row) for row in rows]
    # a run whose id the template would have to escape is not written
    assert chained_texts('run-"1', [], [], [[]] * len(CHUNK_FIELDS)) is None


def test_joined_digests_are_the_digests_joined() -> None:
    data = [b"", b"a", b"x" * 1000]
    assert joined_digests(data) == ",".join(map(sha256_digest, data))
    assert joined_digests(map(memoryview, data)) == joined_digests(data)
    assert joined_digests([]) == ""


def test_payloads_split_by_their_lengths() -> None:
    joined = b"{}" + b"" + b"\x00\xff,\n"
    views = split_payloads(joined, "2,0,4")
    assert views is not None and [bytes(v) for v in views] == [b"{}", b"", b"\x00\xff,\n"]
    assert split_payloads(None, None) == []
    assert split_payloads(b"", "0") is not None
    # lengths that do not add up to the blob
    for lengths in ("2,0,3", "2,0,5", None):
        assert split_payloads(joined, lengths) is None
    assert split_payloads(None, "2") is None


def test_an_intact_chain_verifies_in_any_chunking() -> None:
    rows = build_chain(10)
    head = (10, rows[-1].hash)
    expected = verify_chain("run-1", rows, expected_head=head)
    for size in (1, 3, 10):
        assert _verify(_chunks(rows, size), head) == expected
    empty = ChainChunk(0, None, None, None, [None] * len(CHUNK_FIELDS), None, [])
    assert _verify([empty], (0, GENESIS_HASH)) is not None
    assert _verify([empty], (1, GENESIS_HASH)) is None
    # destroyed payloads (none inline) still verify
    shredded = [dataclasses.replace(row, payload=None) for row in rows]
    assert _verify(_chunks(shredded, 4), head) is not None


def _with_field(good: ChainChunk, index: int, edit: Callable[[str], str]) -> ChainChunk:
    fields = list(good.fields)
    fields[index] = edit(fields[index] or "")
    return dataclasses.replace(good, fields=fields)


def _tampered(good: ChainChunk) -> list[ChainChunk]:
    hashes = (good.hashes or "").split(",")
    previous = (good.previous_hashes or "").split(",")
    step = CHUNK_FIELDS.index("step_id")
    return [
        dataclasses.replace(good, sequences="4,5,7,7"),  # a duplicate
        dataclasses.replace(good, sequences="4,5,6"),  # one missing
        dataclasses.replace(good, sequences="4,6,5,7"),  # reordered
        dataclasses.replace(good, previous_hashes=",".join([GENESIS_HASH, *previous[1:]])),
        dataclasses.replace(good, previous_hashes=",".join(previous[:3])),  # a NULL dropped
        dataclasses.replace(good, hashes=",".join([*hashes[:3], "sha256:" + "0" * 64])),
        dataclasses.replace(good, hashes=",".join(hashes[:3])),
        dataclasses.replace(good, hashes=",".join(h.upper() for h in hashes)),
        dataclasses.replace(good, count=3),
        # a field edited, missing, one value too many or too few
        _with_field(good, step, lambda text: text.replace("s-5", "s-6")),
        dataclasses.replace(good, fields=[*good.fields[:step], None, *good.fields[step + 1 :]]),
        _with_field(good, step, lambda text: text.rsplit("\n", 1)[0]),
        _with_field(good, step, lambda text: text + "\ns-8"),
        dataclasses.replace(good, fields=good.fields[:-1]),
        dataclasses.replace(good, payloads=[b"{}", *good.payloads[1:]]),
        dataclasses.replace(good, payloads=list(good.payloads[1:])),
        dataclasses.replace(good, payloads=[]),
        dataclasses.replace(good, inline="1101"),
        dataclasses.replace(good, inline="111"),
        dataclasses.replace(good, inline="1112"),
        dataclasses.replace(good, inline=None),
        dataclasses.replace(good, payloads=[*good.payloads, b"{}"]),
    ]


def test_anything_that_does_not_verify_answers_none_in_any_chunk() -> None:
    rows = build_chain(10)
    head = (10, rows[-1].hash)
    first, second, third = _chunk(rows[:3]), _chunk(rows[3:7]), _chunk(rows[7:])
    assert _verify([first, second, third], head) is not None
    for broken in _tampered(second):
        assert _verify([first, broken, third], head) is None, broken
    # chunks out of order, one left out, one twice
    assert _verify([second, first, third], head) is None
    assert _verify([first, third], head) is None
    assert _verify([first, second, second, third], head) is None
    # a head that is not the chain's end: a deleted or added tail
    assert _verify([first, second], head) is None
    assert _verify([first, second, third], (9, rows[8].hash)) is None
    forged = "sha256:" + "0" * 64
    last = _chunk(rows[7:])
    assert _verify([first, second, dataclasses.replace(last, hashes=forged)], (10, forged)) is None


def _forged(field: str, value: str) -> tuple[list[ChainChunk], tuple[int, str]]:
    """The chunks of a chain whose fifth event's ``field`` is stored as ``value`` and whose
    hashes from there on an attacker recomputed over the texts the template writes with the
    stored values put in as they are."""
    rows = build_chain(8)
    values = [[_stored(row, name) for name in CHUNK_FIELDS] for row in rows]
    values[4][CHUNK_FIELDS.index(field)] = value
    previous, hashes = GENESIS_HASH, []
    for row, stored in zip(rows, values, strict=True):
        as_written = [
            [v.encode().replace(b" ", b"T")]
            if n in ("logical_time", "recorded_at")
            else [v.encode()]
            for n, v in zip(CHUNK_FIELDS, stored, strict=True)
        ]
        texts = chained_texts(
            "run-1", [previous.encode()], [str(row.sequence).encode()], as_written
        )
        assert texts is not None
        previous = sha256_digest(next(texts))
        hashes.append(previous)
    chunks = []
    for lower in (0, 3, 6):
        part = range(lower, min(lower + 3, 8))
        chunk = _chunk(rows[lower : lower + 3])
        chunks.append(
            dataclasses.replace(
                chunk,
                previous_hashes=",".join([GENESIS_HASH, *hashes][i] for i in part),
                hashes=",".join(hashes[i] for i in part),
                fields=["\n".join(values[i][f] for i in part) for f in range(len(CHUNK_FIELDS))],
            )
        )
    return chunks, (8, hashes[-1])


def test_a_hash_forged_over_a_value_the_template_writes_verifies() -> None:
    # the control for the test below: a forged chain of plain values is a chain (its head, or
    # an anchor, tells it from the one recorded)
    chunks, head = _forged("step_id", "s-other")
    assert _verify(chunks, head) is not None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("event_id", 'e"5'),
        ("event_id", "é-5"),
        ("step_id", "s\t5"),
        ("step_id", "s\n5"),  # a separator: one value too many
        ("type", "\\"),  # what the store writes for a NULL
        ("payload_ref", "inline\x7f"),
        ("payload_hash", 'sha256:"'),
        ("schema_version", "01"),
        ("schema_version", "1.0"),
        ("schema_version", "x"),
        ("schema_version", "-1"),
        ("schema_version", "9007199254740993"),  # beyond the template's integers
        ("logical_time", "2026-08-20 10:15:05.00000"),
        ("logical_time", "2026-08-20T10:15:05.000000"),
        ("logical_time", "2026-8-20 10:15:05.0000000"),
        ("recorded_at", "2026-08-21 10:15:00.000005 "),
        ("recorded_at", "\\"),
    ],
)
def test_a_hash_forged_over_a_value_the_template_cannot_write_does_not_verify(
    field: str, value: str
) -> None:
    # verify_chain would hash another text for it (escaped, parsed or refused): the fast check
    # must not vouch for it, whatever its hash
    chunks, head = _forged(field, value)
    assert _verify(chunks, head) is None


def test_an_event_left_out_of_the_hashes_does_not_verify() -> None:
    # the last event's previous and own hash left out of the joins (as a NULL the aggregate
    # dropped would): its fields are still read, so it must not count as verified unhashed
    rows = build_chain(4)
    good = _chunk(rows)
    short = dataclasses.replace(
        good,
        previous_hashes=",".join(row.previous_hash for row in rows[:3]),
        hashes=",".join(row.hash for row in rows[:3]),
    )
    assert _verify([good], (4, rows[3].hash)) is not None
    assert _verify([short], (4, rows[2].hash)) is None


def test_a_payload_hash_holding_two_digests_does_not_stand_for_two_payloads() -> None:
    # the fifth event's payload_hash forged as two digests joined (and the chain's hashes over
    # it): the inline payloads' digests read as the marked hashes only if there are as many
    # payloads as marks
    other = b'{"other":true}'
    rows = build_chain(8)
    fifth = rows[4].payload
    assert fifth is not None
    value = f"{sha256_digest(fifth)},{sha256_digest(other)}"
    chunks, head = _forged("payload_hash", value)
    middle = dataclasses.replace(chunks[1], inline="010", payloads=[fifth, other])
    assert _verify([chunks[0], middle, chunks[2]], head) is None
    honest = dataclasses.replace(chunks[1], inline="010", payloads=[fifth])
    assert _verify([chunks[0], honest, chunks[2]], head) is None  # its hash is not two digests

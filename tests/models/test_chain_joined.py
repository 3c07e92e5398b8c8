"""The chain check over joined texts (``models.chain_joined``) agrees with ``verify_chain`` on an
intact chain and answers None for anything else, whichever chunk it is in."""

from __future__ import annotations

import dataclasses

from models.canonical import canonicalize_flat
from models.chain import GENESIS_HASH, ChainRow, chain_metadata, verify_chain
from models.chain_joined import ChainChunk, joined_digests, verify_chain_chunks
from models.digest import sha256_digest
from tests.models.test_chain import build_chain


def _chunk(rows: list[ChainRow]) -> ChainChunk:
    """What a store's aggregate gives for ``rows``."""
    inline = [row for row in rows if row.payload is not None]
    return ChainChunk(
        count=len(rows),
        sequences=",".join(str(row.sequence) for row in rows),
        previous_hashes=",".join(row.previous_hash for row in rows),
        hashes=",".join(row.hash for row in rows),
        texts="\n".join(
            row.previous_hash + canonicalize_flat(chain_metadata(row)).decode() + row.payload_hash
            for row in rows
        ),
        payloads=[row.payload for row in inline if row.payload is not None],
        payload_hashes=",".join(row.payload_hash for row in inline) or None,
    )


def _chunks(rows: list[ChainRow], size: int) -> list[ChainChunk]:
    return [_chunk(rows[i : i + size]) for i in range(0, len(rows), size)]


def _verify(chunks: list[ChainChunk], head: tuple[int, str]) -> object:
    return verify_chain_chunks("run-1", chunks, expected_head=head)


def test_joined_digests_are_the_digests_joined() -> None:
    data = [b"", b"a", b"x" * 1000]
    assert joined_digests(data) == ",".join(map(sha256_digest, data))
    assert joined_digests([]) == ""


def test_an_intact_chain_verifies_in_any_chunking() -> None:
    rows = build_chain(10)
    head = (10, rows[-1].hash)
    expected = verify_chain("run-1", rows, expected_head=head)
    for size in (1, 3, 10):
        assert _verify(_chunks(rows, size), head) == expected
    empty = ChainChunk(0, None, None, None, None, [], None)
    assert _verify([empty], (0, GENESIS_HASH)) is not None
    assert _verify([empty], (1, GENESIS_HASH)) is None
    # destroyed payloads (none inline) still verify
    shredded = [dataclasses.replace(row, payload=None) for row in rows]
    assert _verify(_chunks(shredded, 4), head) is not None


def _tampered(good: ChainChunk) -> list[ChainChunk]:
    texts = good.texts.split("\n") if good.texts else []
    hashes = (good.hashes or "").split(",")
    previous = (good.previous_hashes or "").split(",")
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
        dataclasses.replace(good, texts=None),
        dataclasses.replace(good, texts="\n".join(texts[:3])),
        dataclasses.replace(good, texts="\n".join([texts[0] + "\n", *texts[1:]])),
        # texts the template would have had to escape: a quote, non-ASCII, a control character
        dataclasses.replace(good, texts=good.texts.replace("e-5", 'e"5') if good.texts else ""),
        dataclasses.replace(good, texts=good.texts.replace("e-5", "é-5") if good.texts else ""),
        dataclasses.replace(good, texts=good.texts.replace("e-5", "e\x7f5") if good.texts else ""),
        dataclasses.replace(good, texts=good.texts.replace("e-5", "e\t5") if good.texts else ""),
        dataclasses.replace(good, payloads=[b"{}", *good.payloads[1:]]),
        dataclasses.replace(good, payloads=list(good.payloads[1:])),
        dataclasses.replace(good, payloads=[], payload_hashes=good.payload_hashes),
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

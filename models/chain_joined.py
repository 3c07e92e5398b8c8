"""``verify_chain`` for an intact chain read as joined texts, one per column and chunk of events.

A store that can aggregate (``string_agg`` / ``group_concat``) hands each chunk of a run's
events, in ascending ``sequence`` order, as a few texts instead of rows: the sequences, previous
hashes, hashes and inline payloads' hashes each joined with ``SEPARATOR``, and each stored field
of the chained text (``CHUNK_FIELDS``) joined with ``FIELD_SEPARATOR``. This module writes each
event's chained text (``previous_hash ‖ metadata ‖ payload_hash``) from those columns and
``models.chain.TEMPLATE_LITERALS`` with one join per chunk: the store only reads its columns, and
every check but the hashing is one comparison per chunk and column.

Why a joined comparison is exact per event: the separator is a character that no expected
element holds (a digest, a decimal sequence, a field the template writes), so two joins are equal
only when they have the same number of elements and each element is equal. A NULL dropped by the
aggregate, a separator inside a tampered value or one row too many or too few changes the join
(the store writes a NULL as a backslash, so that a dropped NULL cannot make up for a separator
inside another value).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import re
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from models.chain import GENESIS_HASH, TEMPLATE_FIELDS, TEMPLATE_LITERALS, ChainVerification
from models.digest import DIGEST_PREFIX
from models.verification import ChainedEvents

__all__ = [
    "CHUNK_FIELDS",
    "FIELD_SEPARATOR",
    "INSTANT_FIELDS",
    "ChainChunk",
    "JoinedChainCheck",
    "chained_texts",
    "chunk_events",
    "joined_digests",
    "split_payloads",
    "verify_chain_chunks",
]

#: what separates the elements of a joined column of sequences or digests
SEPARATOR = ","
#: what separates the elements of a joined field and the chained texts of a chunk: a control
#: character, which no field the template writes holds
FIELD_SEPARATOR = "\n"
#: the stored fields of the chained text a chunk holds as joined columns, in this order: the
#: template's (``TEMPLATE_FIELDS``) but the run (the one the store was asked for) and the
#: sequence (``ChainChunk.sequences``), then the payload's hash
CHUNK_FIELDS = (*(f for f in TEMPLATE_FIELDS if f not in ("run_id", "sequence")), "payload_hash")
#: the instants' stored form (UTC): ``format_instant`` writes ``T`` for the space and adds ``Z``
INSTANT_FIELDS = ("logical_time", "recorded_at")
_INSTANT_SKELETON = b"0000-00-00 00:00:00.000000"
_DIGITS_TO_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
#: ``%d`` of an int the template writes (0 <= value <= 2**53 - 1; the general emitter beyond)
_DECIMAL = b"(?:0|[1-9][0-9]{0,14})"
_DECIMALS = re.compile(_DECIMAL + b"(?:" + re.escape(FIELD_SEPARATOR.encode()) + _DECIMAL + b")*")
_DIGEST_LENGTH = len(GENESIS_HASH)
_PAYLOAD_HASH = CHUNK_FIELDS.index("payload_hash")
#: the fields of ``ChainedEvents`` a chunk holds as joined columns
_EVENT_FIELDS = tuple(map(CHUNK_FIELDS.index, ("event_id", "type", "payload_ref", "payload_hash")))
#: an event's inline mark as a selector of ``itertools.compress``
_MARKS = bytes.maketrans(b"01", b"\x00\x01")
#: the characters a JSON text holds as themselves: printable ASCII but the quote and backslash
_PLAIN = bytes(sorted(set(range(0x20, 0x7F)) - {ord('"'), ord("\\")}))
#: the digest of a hash object (unbound: no method looked up per item)
_digest = type(hashlib.sha256()).digest


@dataclass(frozen=True, slots=True)
class ChainChunk:
    """Consecutive events of a run as joined texts, in ascending ``sequence`` order."""

    count: int
    #: the decimal sequences, joined by ``SEPARATOR``
    sequences: str | None
    #: each event's ``previous_hash`` and ``hash``, joined by ``SEPARATOR``
    previous_hashes: str | None
    hashes: str | None
    #: each of ``CHUNK_FIELDS``: the events' values joined by ``FIELD_SEPARATOR`` (instants in
    #: the stored form ``2026-11-03 09:00:00.001000``, UTC; the schema version in decimal)
    fields: Sequence[str | None]
    #: for each event, ``1`` if its payload is inline, else ``0``
    inline: str | None
    #: the inline payloads, in order (their hashes are those of the events marked inline)
    payloads: Sequence[bytes | memoryview]


def split_payloads(joined: bytes | None, lengths: str | None) -> list[memoryview] | None:
    """Payloads read as one joined blob and their lengths (decimal, joined by ``SEPARATOR``),
    one view each; None when the lengths do not add up to the blob."""
    if joined is None or lengths is None:
        return [] if joined is None and lengths is None else None
    ends = list(itertools.accumulate(map(int, lengths.split(SEPARATOR))))
    if ends[-1] != len(joined):
        return None
    whole = memoryview(joined)
    return list(map(whole.__getitem__, map(slice, [0, *ends], ends)))


def joined_digests(data: Iterable[bytes | memoryview]) -> str:
    """``sha256_digest`` of each, joined by ``SEPARATOR``: the hashing is the only step per
    item (the hex text, prefixes and separators are written for all of them at once)."""
    raw = b"".join(map(_digest, map(hashlib.sha256, data)))
    if not raw:
        return ""
    return DIGEST_PREFIX + raw.hex(SEPARATOR, 32).replace(SEPARATOR, SEPARATOR + DIGEST_PREFIX)


@functools.lru_cache(maxsize=64)
def _sequence_text(first: int, count: int) -> str:
    """``first .. first + count - 1`` in decimal, joined (the same for every run's chunk)."""
    return SEPARATOR.join(map(str, range(first, first + count)))


@functools.lru_cache(maxsize=8)
def _instant_skeleton(count: int) -> bytes:
    """``count`` stored instants joined, every digit written as 0."""
    return FIELD_SEPARATOR.encode().join([_INSTANT_SKELETON] * count)


def _field_values(name: str, joined: str | None, count: int) -> list[bytes] | None:
    """The ``count`` values of a joined field as the template writes them, or None when they are
    not ``count`` values it writes as they are (printable ASCII without a quote or backslash;
    an instant in the stored form; a decimal)."""
    if joined is None:
        return None
    data = joined.encode()  # a non-ASCII value's UTF-8 bytes fail the checks below
    separator = FIELD_SEPARATOR.encode()
    if name in INSTANT_FIELDS:
        if data.translate(_DIGITS_TO_ZERO) != _instant_skeleton(count):
            return None
        data = data.replace(b" ", b"T")
    elif name == "schema_version":
        if _DECIMALS.fullmatch(data) is None:
            return None
    # a value holding a separator or anything else the template would have to escape leaves
    # more than the separators (a NULL is a backslash, not left out)
    elif data.translate(None, _PLAIN) != separator * (count - 1):
        return None
    values = data.split(separator)
    return values if len(values) == count else None


@functools.lru_cache(maxsize=8)
def _layout(run_id: str) -> tuple[tuple[str, ...], tuple[bytes, ...]] | None:
    """The chained text as alternating columns and constants: the names of the columns (the
    previous hash, ``CHUNK_FIELDS`` and the sequence) and the bytes after each (the run and the
    instants' ``Z`` are constants); None when the run's id is not a text the template writes as
    it is."""
    if run_id.encode().translate(None, _PLAIN):
        return None
    names, after = ["previous_hash"], [TEMPLATE_LITERALS[0]]
    for field, literal in zip(TEMPLATE_FIELDS, TEMPLATE_LITERALS[1:], strict=True):
        if field == "run_id":
            after[-1] += run_id + literal
            continue
        names.append(field)
        after.append(("Z" if field in INSTANT_FIELDS else "") + literal)
    names.append("payload_hash")
    after.append("")  # nothing after the payload hash
    return tuple(names), tuple(text.encode() for text in after)


def chained_texts(
    run_id: str,
    previous_hashes: Sequence[bytes],
    sequences: Sequence[bytes],
    fields: Sequence[Sequence[bytes]],
) -> Iterator[bytes] | None:
    """Each event's chained text, ``previous_hash ‖ metadata ‖ payload_hash``, the metadata
    written from the template (``models.chain.TEMPLATE_LITERALS``) with the events' values as
    given (``fields``: the values of each of ``CHUNK_FIELDS``, the instants as
    ``format_instant`` writes them but the ``Z``; every sequence of values as long as
    ``sequences``), one join per event: the bytes ``metadata_bytes`` writes into it when no
    value needs escaping. None when the run's id needs escaping."""
    layout = _layout(run_id)
    if layout is None:
        return None
    names, after = layout
    columns = {"previous_hash": previous_hashes, "sequence": sequences}
    columns.update(zip(CHUNK_FIELDS, fields, strict=True))
    parts: list[Iterable[bytes]] = []
    for name, text in zip(names, after, strict=True):
        parts += [columns[name], itertools.repeat(text)] if text else [columns[name]]
    # the constants repeat without end: the columns (of one length) end the zip
    return map(b"".join, zip(*parts, strict=False))


def _chunk_hashes(run_id: str, chunk: ChainChunk, first: int, previous: str) -> str | None:
    """The chunk's joined hashes if it verifies after ``first - 1`` events ending in
    ``previous``, else None."""
    n = chunk.count
    if n <= 0 or chunk.sequences != _sequence_text(first, n) or chunk.hashes is None:
        return None
    if len(chunk.fields) != len(CHUNK_FIELDS):
        return None
    # each previous hash is the hash before it: the chunk's hashes shifted by one (which the
    # hashes of the texts must then be)
    if chunk.previous_hashes != (previous + SEPARATOR + chunk.hashes)[: -(_DIGEST_LENGTH + 1)]:
        return None
    previous_hashes = chunk.previous_hashes.encode().split(SEPARATOR.encode())
    checked = [
        _field_values(name, joined, n)
        for name, joined in zip(CHUNK_FIELDS, chunk.fields, strict=True)
    ]
    if len(previous_hashes) != n or None in checked:
        return None
    fields = typing.cast(list[list[bytes]], checked)
    # every part of each text is now one the template writes as it is: the fields checked
    # above, the sequences and the run's id (``chained_texts``), the previous hashes (the
    # hashes before them, which must be these texts' digests)
    texts = chained_texts(
        run_id,
        previous_hashes,
        chunk.sequences.encode().split(SEPARATOR.encode()),  # as checked above
        fields,
    )
    if texts is None:
        return None
    hashes = joined_digests(texts)
    if chunk.hashes != hashes:
        return None
    # the payloads' digests are the payload_hash fields of the events marked inline (a digest
    # holds no separator: equal joins of as many are equal digests)
    inline = chunk.inline
    if inline is None or len(inline) != n or inline.strip("01"):
        return None
    if len(chunk.payloads) != inline.count("1"):
        return None
    marked = itertools.compress(fields[_PAYLOAD_HASH], inline.encode().translate(_MARKS))
    if joined_digests(chunk.payloads).encode() != SEPARATOR.encode().join(marked):
        return None
    return hashes


class JoinedChainCheck:
    """``verify_chain`` of one run for an intact chain read as ``ChainChunk``s, consecutive and
    in order, fed one at a time (a store reads the next chunk while this one is hashed);
    ``on_events``: called with the events of each chunk that verifies, as the checks beyond
    the chain read them (its work then also overlaps the store's read of the next chunk)."""

    def __init__(
        self,
        run_id: str,
        *,
        on_events: Callable[[ChainedEvents], None] | None = None,
        genesis: str = GENESIS_HASH,
    ) -> None:
        self.run_id = run_id
        self.count = 0
        #: ``genesis``: the run header's (``models.chain.header_genesis``); a chain that starts
        #: from ``GENESIS_HASH`` instead was recorded before header chaining
        self.head = genesis
        self.header_chained: bool | None = None if genesis == GENESIS_HASH else True
        self.intact = True
        self.on_events = on_events

    def add(self, chunk: ChainChunk) -> bool:
        """Whether ``chunk`` verifies after the chunks added so far (once not, never again)."""
        if not self.intact or (chunk.count == 0 and self.count == 0):
            return self.intact  # an empty run reads as one empty chunk
        if self.count == 0 and self.header_chained and chunk.previous_hashes is not None:
            if chunk.previous_hashes.startswith(GENESIS_HASH):
                self.head, self.header_chained = GENESIS_HASH, False
        hashes = _chunk_hashes(self.run_id, chunk, self.count + 1, self.head)
        if hashes is None:
            self.intact = False
            return False
        if self.on_events is not None:
            self.on_events(chunk_events(chunk, self.count + 1, hashes))
        self.count += chunk.count
        self.head = hashes[-_DIGEST_LENGTH:]
        return True

    def verification(self, *, expected_head: tuple[int, str]) -> ChainVerification | None:
        """The verification when every chunk verified and the chain ends at
        ``expected_head``, else None (``verify_chain`` then names what and where, or verifies
        what the template cannot write)."""
        if self.count == 0 and self.header_chained and expected_head == (0, GENESIS_HASH):
            self.head, self.header_chained = GENESIS_HASH, False
        if not self.intact or expected_head != (self.count, self.head):
            return None
        return ChainVerification(
            run_id=self.run_id,
            intact=True,
            event_count=self.count,
            head_sequence=self.count,
            head_hash=self.head,
            header_chained=self.header_chained if self.count else None,
        )


def chunk_events(chunk: ChainChunk, first: int, hashes: str) -> ChainedEvents:
    """The events of a chunk that verified after ``first - 1`` events with ``hashes`` (its
    joined hashes): each field split from its join (every value checked plain printable ASCII
    without the separator), each event's inline payload or None."""
    n = chunk.count
    event_ids, types, refs, payload_hashes = (
        typing.cast(str, chunk.fields[index]).split(FIELD_SEPARATOR) for index in _EVENT_FIELDS
    )
    marks = typing.cast(str, chunk.inline).encode().translate(_MARKS)
    inline = dict(zip(itertools.compress(range(n), marks), chunk.payloads, strict=True))
    return ChainedEvents(
        sequences=range(first, first + n),
        event_ids=event_ids,
        types=types,
        payload_refs=refs,
        payload_hashes=payload_hashes,
        hashes=hashes.split(SEPARATOR),
        payloads=list(map(inline.get, range(n))),
    )


def verify_chain_chunks(
    run_id: str, chunks: Iterable[ChainChunk], *, expected_head: tuple[int, str]
) -> ChainVerification | None:
    """``verify_chain`` for an intact chain read as ``ChainChunk``s (consecutive, in order):
    the verification when the chain is intact and ends at ``expected_head``, None when anything
    does not verify or a value is not plain printable ASCII without escapes."""
    check = JoinedChainCheck(run_id)
    for chunk in chunks:
        if not check.add(chunk):
            return None
    return check.verification(expected_head=expected_head)

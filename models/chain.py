"""The hash chain over a run's events (rule 8), as pure functions.

    hash_0 = GENESIS_HASH
    hash_n = SHA-256( hash_{n-1} ‖ canonical(metadata_n) ‖ payload_hash_n )

where ``‖`` is byte concatenation of the ASCII ``sha256:<hex>`` texts and the RFC 8785 bytes,
and ``metadata_n`` is the event without its three hash fields:
``{event_id, logical_time, payload_ref, recorded_at, run_id, schema_version, sequence,
step_id, type}`` with instants written by ``format_instant`` (UTC, microseconds, ``Z``).
Both hash texts have a fixed length, and the canonical JSON is self-delimiting, so the
concatenation is unambiguous. The chain covers hashes, not content: payload bytes can be
destroyed (crypto-shredding) while the chain still verifies (rule 17).

``GENESIS_HASH`` is the SHA-256 of the ASCII text ``replaybook:execution-chain:v1``.

The run header is chained too (issue 31): a run started since carries, as the ``previous_hash``
of its first event, ``header_genesis(header)`` = SHA-256 of ``replaybook:execution-chain:v2:``
‖ ``header_digest(header)``, the digest of the header as created (everything but ``status``
and ``outcome``, which finishing the run writes and which are checked against the run's
terminal event instead). Rewriting the graph, labels, pinned versions, environment or source
manifest, retention class or creation time changes the genesis the verifier computes, so the
first event no longer links to it. A run recorded before links to ``GENESIS_HASH``: it still
verifies, reported as "header not chained".
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from models.base import Record, format_instant
from models.canonical import canonical_hash, canonicalize_flat
from models.digest import DIGEST_PREFIX, sha256_digest

GENESIS_HASH = sha256_digest(b"replaybook:execution-chain:v1")
CHAIN_SCHEMA_VERSION = 1
#: what finishing a run writes into its header (checked against its terminal event, not chained)
HEADER_FINISH_FIELDS = ("status", "outcome")


def header_digest(header: Mapping[str, Any]) -> str:
    """The digest of a run header (its stored JSON record) as created: every field but
    ``HEADER_FINISH_FIELDS``."""
    return canonical_hash({k: v for k, v in header.items() if k not in HEADER_FINISH_FIELDS})


def header_genesis(header: Mapping[str, Any]) -> str:
    """The ``previous_hash`` of the first event of a run started with ``header``."""
    return sha256_digest(b"replaybook:execution-chain:v2:" + header_digest(header).encode("ascii"))


@dataclass(frozen=True, slots=True)
class ChainRow:
    """An event as stored, reduced to what verification needs (cheap to build per row)."""

    run_id: str
    sequence: int
    event_id: str
    step_id: str
    type: str
    payload_ref: str
    payload_hash: str
    previous_hash: str
    hash: str
    logical_time: datetime
    recorded_at: datetime
    schema_version: int = CHAIN_SCHEMA_VERSION
    #: the payload bytes when the store has them at hand (inline); None when held elsewhere
    payload: bytes | None = None


def chain_metadata(row: ChainRow) -> dict[str, str | int]:
    """The metadata of one event exactly as it enters the link hash (keys in canonical order)."""
    return {
        "event_id": row.event_id,
        "logical_time": format_instant(row.logical_time),
        "payload_ref": row.payload_ref,
        "recorded_at": format_instant(row.recorded_at),
        "run_id": row.run_id,
        "schema_version": row.schema_version,
        "sequence": row.sequence,
        "step_id": row.step_id,
        "type": str(row.type),
    }


#: the canonical metadata of an event whose texts need no escaping: RFC 8785 writes the keys in
#: this order, each plain ASCII text between quotes and each int in decimal
_TEMPLATE = (
    '{"event_id":"%s","logical_time":"%s","payload_ref":"%s","recorded_at":"%s","run_id":"%s",'
    '"schema_version":%d,"sequence":%d,"step_id":"%s","type":"%s"}'
)
_SAFE = 2**53 - 1


def metadata_bytes(
    event_id: str,
    logical_time: str,
    payload_ref: str,
    recorded_at: str,
    run_id: str,
    schema_version: int,
    sequence: int,
    step_id: str,
    event_type: str,
) -> bytes:
    """``canonicalize_flat`` of the chain metadata (instants already as ``format_instant``
    text), from a fixed template when every text is printable ASCII without a quote or a
    backslash (what the template writes is then exactly the canonical form); otherwise from
    the general emitter."""
    texts = event_id + logical_time + payload_ref + recorded_at + run_id + step_id + event_type
    if (
        texts.isascii()
        and texts.isprintable()
        and '"' not in texts
        and "\\" not in texts
        and type(schema_version) is int  # bool and int subclasses take the general emitter
        and type(sequence) is int
        and 0 <= sequence <= _SAFE
        and 0 <= schema_version <= _SAFE
    ):
        return (
            _TEMPLATE
            % (
                event_id,
                logical_time,
                payload_ref,
                recorded_at,
                run_id,
                schema_version,
                sequence,
                step_id,
                event_type,
            )
        ).encode("ascii")
    return canonicalize_flat(
        {
            "event_id": event_id,
            "logical_time": logical_time,
            "payload_ref": payload_ref,
            "recorded_at": recorded_at,
            "run_id": run_id,
            "schema_version": schema_version,
            "sequence": sequence,
            "step_id": step_id,
            "type": event_type,
        }
    )


def link_hash(previous_hash: str, metadata: dict[str, str | int], payload_hash: str) -> str:
    """``SHA-256(previous_hash ‖ canonical(metadata) ‖ payload_hash)`` as a digest."""
    h = hashlib.sha256(previous_hash.encode("ascii"))
    h.update(canonicalize_flat(metadata))
    h.update(payload_hash.encode("ascii"))
    return DIGEST_PREFIX + h.hexdigest()


def chained_hash(previous_hash: str, metadata: bytes, payload_hash: str) -> str:
    """``SHA-256(previous_hash ‖ metadata ‖ payload_hash)`` as a digest, ``metadata`` being
    the canonical metadata bytes (``metadata_bytes``)."""
    h = hashlib.sha256(previous_hash.encode("ascii"))
    h.update(metadata)
    h.update(payload_hash.encode("ascii"))
    return DIGEST_PREFIX + h.hexdigest()


def row_hash(row: ChainRow, previous_hash: str) -> str:
    """The hash ``row`` must carry when it follows ``previous_hash``."""
    metadata = metadata_bytes(
        row.event_id,
        format_instant(row.logical_time),
        row.payload_ref,
        format_instant(row.recorded_at),
        row.run_id,
        row.schema_version,
        row.sequence,
        row.step_id,
        str(row.type),
    )
    return chained_hash(previous_hash, metadata, row.payload_hash)


#: ``format_instant`` of an instant in UTC: its ``isoformat`` with microseconds, ``+00:00``
#: written ``Z`` (fixed widths; a year below 1000 with leading zeros, as ``isoformat``)
_UTC_INSTANT = "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ"
#: ``previous_hash ‖ metadata ‖ payload_hash`` as one text, the metadata from ``_TEMPLATE``
#: with both instants written from their fields (``_UTC_INSTANT``)
_UTC_LINKED = (
    "%s"
    + _TEMPLATE.replace('"logical_time":"%s"', f'"logical_time":"{_UTC_INSTANT}"', 1).replace(
        '"recorded_at":"%s"', f'"recorded_at":"{_UTC_INSTANT}"', 1
    )
    + "%s"
)
assert _UTC_LINKED.count(_UTC_INSTANT) == 2


def utc_link_hash(
    previous_hash: str,
    event_id: str,
    logical_time: datetime,
    payload_ref: str,
    recorded_at: datetime,
    run_id: str,
    schema_version: int,
    sequence: int,
    step_id: str,
    event_type: str,
    payload_hash: str,
) -> str | None:
    """The link hash of an event with these fields (``row_hash``) when they are the usual ones
    — plain texts the template writes as they are (``metadata_bytes``), instants in UTC, ASCII
    hashes — hashed in one piece; None otherwise (``link_hash_of`` then takes the general way).
    The same bytes as ``row_hash`` without its two ``format_instant`` calls (C ``isoformat``
    parsing its keyword argument) and the calls between them: appending and verifying do this
    for every event."""
    if (
        logical_time.tzinfo is not UTC
        or recorded_at.tzinfo is not UTC
        or type(logical_time) is not datetime
        or type(recorded_at) is not datetime
        or type(event_type) is not str
    ):
        return None
    texts = event_id + payload_ref + run_id + step_id + event_type
    if not (
        texts.isascii()
        and texts.isprintable()
        and '"' not in texts
        and "\\" not in texts
        and type(sequence) is int
        and type(schema_version) is int
        and 0 <= sequence <= _SAFE
        and 0 <= schema_version <= _SAFE
    ):
        return None
    linked = _UTC_LINKED % (
        previous_hash,
        event_id,
        logical_time.year,
        logical_time.month,
        logical_time.day,
        logical_time.hour,
        logical_time.minute,
        logical_time.second,
        logical_time.microsecond,
        payload_ref,
        recorded_at.year,
        recorded_at.month,
        recorded_at.day,
        recorded_at.hour,
        recorded_at.minute,
        recorded_at.second,
        recorded_at.microsecond,
        run_id,
        schema_version,
        sequence,
        step_id,
        event_type,
        payload_hash,
    )
    if not linked.isascii():  # a hash that is not ASCII: the general way says what it says
        return None
    return DIGEST_PREFIX + hashlib.sha256(linked.encode("ascii")).hexdigest()


def link_hash_of(
    previous_hash: str,
    event_id: str,
    logical_time: datetime,
    payload_ref: str,
    recorded_at: datetime,
    run_id: str,
    schema_version: int,
    sequence: int,
    step_id: str,
    event_type: str,
    payload_hash: str,
) -> str:
    """The link hash of an event with these fields: ``row_hash`` of its row."""
    fast = utc_link_hash(
        previous_hash,
        event_id,
        logical_time,
        payload_ref,
        recorded_at,
        run_id,
        schema_version,
        sequence,
        step_id,
        event_type,
        payload_hash,
    )
    if fast is not None:
        return fast
    metadata = metadata_bytes(
        event_id,
        format_instant(logical_time),
        payload_ref,
        format_instant(recorded_at),
        run_id,
        schema_version,
        sequence,
        step_id,
        event_type,
    )
    return chained_hash(previous_hash, metadata, payload_hash)


def _utc_link_hash(row: ChainRow, previous_hash: str) -> str | None:
    """``utc_link_hash`` of a row (verification's inner loop)."""
    return utc_link_hash(
        previous_hash,
        row.event_id,
        row.logical_time,
        row.payload_ref,
        row.recorded_at,
        row.run_id,
        row.schema_version,
        row.sequence,
        row.step_id,
        row.type,
        row.payload_hash,
    )


#: the fields the template writes, in its order (the keys of ``chain_metadata``)
TEMPLATE_FIELDS = (
    "event_id",
    "logical_time",
    "payload_ref",
    "recorded_at",
    "run_id",
    "schema_version",
    "sequence",
    "step_id",
    "type",
)
#: the fixed text around the fields: ``TEMPLATE_LITERALS[i]`` comes before ``TEMPLATE_FIELDS[i]``
#: and the last one closes the object (a store writes the chained text from these)
TEMPLATE_LITERALS = tuple(re.split("%[sd]", _TEMPLATE))


class BreakReason(StrEnum):
    GAP = "gap"
    REORDERED = "reordering"
    DUPLICATE = "duplicate sequence"
    FOREIGN_EVENT = "event of another run"
    PREVIOUS_HASH_MISMATCH = "previous-hash mismatch"
    PAYLOAD_HASH_MISMATCH = "payload hash mismatch"
    HASH_MISMATCH = "event hash mismatch"
    HEAD_MISMATCH = "head mismatch"
    #: the run header is not the one chained at genesis, or disagrees with its terminal event
    HEADER = "run header"
    #: beyond the chain (``models.verification``): a payload or referenced artifact, a row of
    #: a lookup table, an external anchor
    ARTIFACT = "artifact"
    PROJECTION = "projection"
    ANCHOR = "anchor"


class VerificationProblem(Record):
    """One thing that does not verify: where (the sequence it is about, when there is one), what
    kind (``chain``, ``payload``, ``artifact``, a table name, ``anchor``) and a sentence."""

    sequence: int | None
    kind: str
    message: str


class ChainVerification(Record):
    """The outcome of verifying one run's chain."""

    run_id: str
    intact: bool
    event_count: int
    head_sequence: int
    head_hash: str
    broken_at: int | None = None
    reason: BreakReason | None = None
    detail: str | None = None
    #: how many of each thing were checked: events, payloads, artifacts, projections, anchors
    checked: dict[str, int] = Field(default_factory=dict)
    #: every problem found, first (lowest sequence) first; the first one is ``broken_at``
    problems: tuple[VerificationProblem, ...] = ()
    #: whether the run header is chained (``header_genesis``); False for a run recorded before
    #: header chaining (its header is then only checked against its terminal event); None when
    #: not known (no event, or a chain verified without its header)
    header_chained: bool | None = None

    def summary(self) -> str:
        if self.intact:
            return f"intact: {self.event_count} events, head {self.head_hash}"
        if self.reason in _SENTENCE_REASONS:
            where = "" if self.broken_at is None else f" at sequence {self.broken_at}"
            return f"broken{where}: {self.detail}"
        return f"broken at sequence {self.broken_at}: {self.reason} ({self.detail})"

    def report(self) -> dict[str, Any]:
        """The ``runs verify --json`` document."""
        problems = list(self.problems)
        if not self.intact and not problems:
            problems = [
                VerificationProblem(sequence=self.broken_at, kind="chain", message=self.summary())
            ]
        return {
            "run_id": self.run_id,
            "intact": self.intact,
            "events": self.event_count,
            "head": self.head_hash,
            "head_sequence": self.head_sequence,
            "head_hash": self.head_hash,
            "checked": {
                "events": self.event_count,
                **dict.fromkeys(("payloads", "artifacts", "projections", "anchors"), 0),
                **self.checked,
            },
            "summary": self.summary(),
            "header": _HEADER_STATES[self.header_chained],
            "broken_at": self.broken_at,
            "reason": None if self.reason is None else str(self.reason),
            "problems": [p.model_dump(mode="json") for p in problems],
        }


_HEADER_STATES = {
    True: "chained",
    False: "not chained (recorded before header chaining)",
    None: "unknown",
}

#: reasons whose ``detail`` is a whole sentence naming the place
_SENTENCE_REASONS = frozenset(
    {BreakReason.ARTIFACT, BreakReason.PROJECTION, BreakReason.ANCHOR, BreakReason.HEADER}
)


def verify_chain(
    run_id: str,
    rows: Iterable[ChainRow],
    *,
    expected_head: tuple[int, str] | None = None,
    genesis: str = GENESIS_HASH,
) -> ChainVerification:
    """Verify rows read in ascending ``sequence`` order; name the first broken sequence.

    ``expected_head`` is the (sequence, hash) the run header recorded at its last append;
    it detects a deleted or added tail, which a chain alone cannot. ``genesis``: what the first
    event links to (``header_genesis`` of the stored header for a run whose header is chained).
    """
    rows = list(rows)
    running, chained = genesis, None
    if genesis != GENESIS_HASH:
        first = rows[0].previous_hash if rows and rows[0].sequence == 1 else None
        if first == GENESIS_HASH or (not rows and expected_head == (0, GENESIS_HASH)):
            # recorded before header chaining
            running, chained = GENESIS_HASH, (False if rows else None)
        elif first is not None and first != genesis:
            return _broken(run_id, 0, genesis, 1, BreakReason.HEADER, HEADER_REWRITTEN)
        elif first is not None:
            chained = True
    expected = 1
    #: each event's hash and sequence: what a misplaced link names (made on the first one)
    seen_hashes: dict[str, int] | None = None
    for row in rows:
        payload = row.payload
        if (  # the usual event, checked in line: what ``_first_problem`` finds nothing wrong in
            row.run_id == run_id
            and row.sequence == expected
            and row.previous_hash == running
            and (
                payload is None
                or DIGEST_PREFIX + hashlib.sha256(payload).hexdigest() == row.payload_hash
            )
            and _utc_link_hash(row, running) == row.hash
        ):
            running = row.hash
            expected += 1
            continue
        if seen_hashes is None:
            seen_hashes = {each.hash: each.sequence for each in rows}
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


#: the sentence of a header that is not the one chained at genesis
HEADER_REWRITTEN = (
    "run header rewritten: it is not the header chained at genesis (graph, labels, pinned "
    "versions, environment manifest, source manifest, retention class or creation time changed)"
)


def _first_problem(
    run_id: str, row: ChainRow, expected: int, running: str, seen_hashes: dict[str, int]
) -> tuple[BreakReason, str] | None:
    if row.run_id != run_id:
        return BreakReason.FOREIGN_EVENT, f"row belongs to run {row.run_id!r}"
    if row.sequence > expected:
        return BreakReason.GAP, f"sequence {expected} is missing (next is {row.sequence})"
    if row.sequence < expected:
        return BreakReason.DUPLICATE, f"sequence {row.sequence} appears again after {expected - 1}"
    if row.previous_hash != running:
        linked = seen_hashes.get(row.previous_hash)
        if linked is not None:
            return (
                BreakReason.REORDERED,
                f"links to the event at sequence {linked}, not to sequence {expected - 1}",
            )
        return (
            BreakReason.PREVIOUS_HASH_MISMATCH,
            "previous_hash is not the hash of the event before",
        )
    if row.payload is not None and sha256_digest(row.payload) != row.payload_hash:
        return BreakReason.PAYLOAD_HASH_MISMATCH, "stored payload does not hash to payload_hash"
    if row_hash(row, running) != row.hash:
        return BreakReason.HASH_MISMATCH, "metadata or payload_hash differs from what was hashed"
    return None


def _broken(
    run_id: str, count: int, head: str, at: int, reason: BreakReason, detail: str
) -> ChainVerification:
    return ChainVerification(
        run_id=run_id,
        intact=False,
        event_count=count,
        head_sequence=count,
        head_hash=head,
        broken_at=at,
        reason=reason,
        detail=detail,
    )

"""Verification beyond the chain, as pure rules: everything later read as evidence must be what
the chained events say.

The chain (``models.chain``) proves the events; replay, reconciliation and retry also read
payloads held in the artifact store, the artifacts the events point to and the lookup tables
(side effects, approvals, policy decisions, checkpoints, fixtures, …). Each lookup row is
checked against the chained event that recorded it: its key, its sequence, its content hash,
its looked-up columns and its whole record must be what that event's payload says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from models.chain import BreakReason, ChainRow, ChainVerification, VerificationProblem

__all__ = [
    "ChainedEvents",
    "ExpectedRow",
    "ProjectionRule",
    "chained_events",
    "compare_row",
    "expected_rows",
    "rows_as_expected",
    "with_problems",
]

#: the kind of a problem -> the break reason it reports
_REASONS: dict[str, BreakReason] = {
    "payload": BreakReason.ARTIFACT,
    "artifact": BreakReason.ARTIFACT,
    "anchor": BreakReason.ANCHOR,
}


@dataclass(frozen=True, slots=True)
class ChainedEvents:
    """What the checks beyond the chain read of a run's chained events, as columns in the
    stored order (one list per field: a store that reads joined columns builds no object per
    event)."""

    sequences: Sequence[int]
    event_ids: Sequence[str]
    types: Sequence[str]
    payload_refs: Sequence[str]
    payload_hashes: Sequence[str]
    hashes: Sequence[str]
    #: each event's inline payload, None when it is held elsewhere
    payloads: Sequence[bytes | memoryview | None]


def chained_events(rows: Sequence[ChainRow]) -> ChainedEvents:
    """The ``ChainedEvents`` of rows read one per event (a store's general path)."""
    return ChainedEvents(
        sequences=[row.sequence for row in rows],
        event_ids=[row.event_id for row in rows],
        types=[row.type for row in rows],
        payload_refs=[row.payload_ref for row in rows],
        payload_hashes=[row.payload_hash for row in rows],
        hashes=[row.hash for row in rows],
        payloads=[row.payload for row in rows],
    )


@dataclass(frozen=True)
class ProjectionRule:
    """How a lookup table derives from events: which events carry its records, what a record
    must contain to be one (``signature``), its key and its looked-up columns."""

    table: str
    #: how a row is named in a problem, e.g. ``side effect``
    label: str
    event_types: frozenset[str]
    key_column: str
    #: the record's own id field when it has one; else the carrying event's id is the key
    natural_key: str | None
    signature: frozenset[str]
    #: the looked-up columns, each holding the record's field of the same name
    columns: tuple[str, ...]
    #: a row later events update (a side effect's status); else the first event wins
    mutable: bool = False

    @property
    def compared(self) -> tuple[str, ...]:
        """The stored row's columns an ``ExpectedRow``'s ``values`` give, in order: the
        looked-up ones, the sequence of the event that recorded it (unless looked up: a
        checkpoint's row keeps its own), its content hash and its record."""
        sequence = () if "sequence" in self.columns else ("sequence",)
        return (*self.columns, *sequence, "content_hash", "record")


class ExpectedRow(NamedTuple):
    """A lookup row as the chained event that recorded it says it must be (a tuple: one is
    built per lookup row of a run)."""

    key: str
    sequence: int
    content_hash: str
    record: Mapping[str, Any]
    #: the values of the row's ``ProjectionRule.compared`` columns, in order
    values: tuple[Any, ...]


def expected_rows(
    rule: ProjectionRule, events: Iterable[tuple[int, str, str, str, Any]]
) -> dict[str, ExpectedRow]:
    """The rows ``rule``'s table must hold, from ``(sequence, event_id, type, payload_hash,
    payload JSON)`` of the run's events in order. Mirrors how the ledger writes them: the first
    event of a key inserts, a later one with other content updates a mutable row, the same
    content again changes nothing."""
    rows: dict[str, ExpectedRow] = {}
    types, signature, natural_key = rule.event_types, rule.signature, rule.natural_key
    columns, own_sequence = rule.columns, "sequence" in rule.columns
    for sequence, event_id, type_, payload_hash, payload in events:
        if type_ not in types or not isinstance(payload, dict) or not payload.keys() >= signature:
            continue
        key = str(payload[natural_key]) if natural_key else event_id
        known = rows.get(key)
        if known is not None and (not rule.mutable or known.content_hash == payload_hash):
            continue
        looked_up = tuple(map(payload.get, columns))
        values = (
            (*looked_up, payload_hash, payload)
            if own_sequence
            else (*looked_up, sequence, payload_hash, payload)
        )
        rows[key] = ExpectedRow(key, sequence, payload_hash, payload, values)
    return rows


def rows_as_expected(
    expected: Iterable[ExpectedRow], stored: Sequence[tuple[Any, ...] | None]
) -> bool:
    """Whether each stored row (the values of its ``ProjectionRule.compared`` columns, in
    order; None for a missing one) equals the ``values`` of the expected row at the same place:
    one comparison of two lists, natively (each value by ``==``, records in depth). When True,
    ``compare_row`` finds nothing in any of them; else it names what differs."""
    return None not in stored and list(stored) == [row.values for row in expected]


def compare_row(
    rule: ProjectionRule,
    expected: ExpectedRow,
    actual: Mapping[str, Any],
    same_record: Callable[[Mapping[str, Any], Mapping[str, Any]], bool],
) -> str | None:
    """The first way the stored row ``actual`` differs from ``expected``, as a sentence, or
    None. ``same_record`` decides record equality when plain equality fails (canonical form)."""
    name = f"{rule.label} {expected.key}"
    for column, value in zip(rule.columns, expected.values, strict=False):
        stored = actual.get(column)
        if stored != value:
            return f"{name} {column} {stored} disagrees with the chained event ({value})"
    # a checkpoint's row keeps its own sequence (a column above), others the event's
    if "sequence" not in rule.columns and actual.get("sequence") != expected.sequence:
        return (
            f"{name} is recorded at sequence {actual.get('sequence')} but the chained event "
            f"that recorded it is at sequence {expected.sequence}"
        )
    if actual.get("content_hash") != expected.content_hash:
        return (
            f"{name} content hash {actual.get('content_hash')} disagrees with the chained "
            f"event ({expected.content_hash})"
        )
    record = actual.get("record")
    if type(record) is not dict and not isinstance(record, Mapping):
        return f"{name} record is not a JSON object"
    if record != expected.record and not same_record(record, expected.record):
        for field in sorted(set(record) | set(expected.record)):
            if record.get(field) != expected.record.get(field):
                return (
                    f"{name} {field} {_short(record.get(field))} disagrees with the chained "
                    f"event ({_short(expected.record.get(field))})"
                )
        return f"{name} record disagrees with the chained event"
    return None


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 80 else text[:77] + "…"


def with_problems(
    chain: ChainVerification, problems: Iterable[VerificationProblem], checked: dict[str, int]
) -> ChainVerification:
    """The verification of a run: its chain's, broken at the first problem found beyond it
    (an anchor's first, then the lowest sequence).

    A broken chain stays broken where it broke (later checks read what it no longer proves)."""
    # an anchor that disagrees comes first: a truncated or re-chained run explains every
    # other problem (orphaned rows, …); then by sequence
    found = sorted(
        problems, key=lambda p: (p.kind != "anchor", p.sequence is None, p.sequence or 0)
    )
    if not chain.intact:
        first = VerificationProblem(sequence=chain.broken_at, kind="chain", message=chain.summary())
        return chain.model_copy(update={"checked": checked, "problems": (first, *found)})
    if not found:
        return chain.model_copy(update={"checked": checked})
    first = found[0]
    reason = _REASONS.get(first.kind, BreakReason.PROJECTION)
    return chain.model_copy(
        update={
            "intact": False,
            "broken_at": first.sequence,
            "reason": reason,
            "detail": first.message,
            "checked": checked,
            "problems": tuple(found),
        }
    )

"""Verification beyond the chain, as pure rules: everything later read as evidence must be what
the chained events say.

The chain (``models.chain``) proves the events; replay, reconciliation and retry also read
payloads held in the artifact store, the artifacts the events point to and the lookup tables
(side effects, approvals, policy decisions, checkpoints, fixtures, …). Each lookup row is
checked against the chained event that recorded it: its key, its sequence, its content hash,
its looked-up columns and its whole record must be what that event's payload says.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from models.canonical import canonicalize
from models.chain import BreakReason, ChainRow, ChainVerification, VerificationProblem

__all__ = [
    "ChainedEvents",
    "ExpectedRow",
    "ProjectionRule",
    "chained_events",
    "compare_row",
    "expected_rows",
    "header_finish_problem",
    "joined_events",
    "rows_as_expected",
    "with_problems",
]

#: the kind of a problem -> the break reason it reports
_REASONS: dict[str, BreakReason] = {
    "payload": BreakReason.ARTIFACT,
    "artifact": BreakReason.ARTIFACT,
    "anchor": BreakReason.ANCHOR,
    "header": BreakReason.HEADER,
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

    def selected(self, which: Iterable[bool]) -> ChainedEvents:
        """The events ``which`` marks (one mark per event, in order)."""
        marks = list(which)
        return ChainedEvents(
            *(list(itertools.compress(getattr(self, name), marks)) for name in _EVENT_COLUMNS)
        )


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


def joined_events(parts: Sequence[ChainedEvents]) -> ChainedEvents:
    """The ``ChainedEvents`` of consecutive parts of a run, in order, as one."""
    if len(parts) == 1:
        return parts[0]

    def column(name: str) -> list[Any]:
        return list(itertools.chain.from_iterable(getattr(part, name) for part in parts))

    return ChainedEvents(*map(column, _EVENT_COLUMNS))


#: the fields of ``ChainedEvents``, in order
_EVENT_COLUMNS = tuple(field.name for field in dataclasses.fields(ChainedEvents))


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
        """The stored row's columns compared with the expected row, in order: the looked-up
        ones, the sequence of the event that recorded it (unless looked up: a checkpoint's row
        keeps its own), its content hash and its record."""
        sequence = () if "sequence" in self.columns else ("sequence",)
        return (*self.columns, *sequence, "content_hash", "record")


class ExpectedRow(NamedTuple):
    """A lookup row as the chained event that recorded it says it must be (a tuple: one is
    built per lookup row of a run)."""

    key: str
    sequence: int
    content_hash: str
    record: Mapping[str, Any]


#: an ``ExpectedRow`` from a tuple of its fields, without the Python-level ``__new__``
_expected_row = functools.partial(tuple.__new__, ExpectedRow)


def expected_rows(
    rule: ProjectionRule, events: Iterable[tuple[int, str, str, str, Any]]
) -> dict[str, ExpectedRow]:
    """The rows ``rule``'s table must hold, from ``(sequence, event_id, type, payload_hash,
    payload JSON)`` of the run's events in order. Mirrors how the ledger writes them: the first
    event of a key inserts, a later one with other content updates a mutable row, the same
    content again changes nothing."""
    rows: dict[str, ExpectedRow] = {}
    types, signature, natural_key = rule.event_types, rule.signature, rule.natural_key
    for sequence, event_id, type_, payload_hash, payload in events:
        if type_ not in types or not isinstance(payload, dict) or not payload.keys() >= signature:
            continue
        key = str(payload[natural_key]) if natural_key else event_id
        known = rows.get(key)
        if known is not None and (not rule.mutable or known.content_hash == payload_hash):
            continue
        rows[key] = _expected_row((key, sequence, payload_hash, payload))
    return rows


def rows_as_expected(
    rule: ProjectionRule, expected: Sequence[ExpectedRow], stored: Sequence[Sequence[Any]]
) -> bool:
    """Whether the stored rows, given as the values of each of ``rule.compared``'s columns in
    the order of ``expected``, are the expected ones: one comparison per column, natively (each
    value by ``==``, records in depth). When True, ``compare_row`` finds nothing in any of
    them; else it names what differs."""
    records = [row.record for row in expected]
    wanted: list[list[Any]] = [[record.get(c) for record in records] for c in rule.columns]
    if "sequence" not in rule.columns:
        wanted.append([row.sequence for row in expected])
    wanted += [[row.content_hash for row in expected], records]
    return len(stored) == len(wanted) and all(
        list(column) == values for column, values in zip(stored, wanted, strict=True)
    )


def compare_row(
    rule: ProjectionRule,
    expected: ExpectedRow,
    actual: Mapping[str, Any],
    same_record: Callable[[Mapping[str, Any], Mapping[str, Any]], bool],
) -> str | None:
    """The first way the stored row ``actual`` differs from ``expected``, as a sentence, or
    None. ``same_record`` decides record equality when plain equality fails (canonical form)."""
    name = f"{rule.label} {expected.key}"
    for column in rule.columns:
        stored, value = actual.get(column), expected.record.get(column)
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


def header_finish_problem(
    status: Any, outcome: Any, terminal: tuple[str, Any] | None
) -> str | None:
    """What is wrong with the status and outcome a run header shows (what finishing the run
    wrote, not chained itself) given the run's terminal event (type, payload JSON), as a
    sentence, or None. A COMPLETED header shows the RUN_COMPLETED event's outcome; a FAILED
    one ends in RUN_FAILED and shows its error and message (or the replay's stop reason); a
    RUNNING one shows no outcome (its terminal event may be written already: the header is
    finished after it)."""
    kind, payload = terminal if terminal is not None else (None, None)
    data = payload if isinstance(payload, dict) else {}
    where = "run header"
    if status == "COMPLETED":
        if kind != "RUN_COMPLETED":
            return f"{where} says COMPLETED but the chain ends with {kind or 'no terminal event'}"
        if canonicalize(outcome) != canonicalize(data.get("outcome")):
            return (
                f"{where} outcome {_short(outcome)} disagrees with the chained RUN_COMPLETED "
                f"event ({_short(data.get('outcome'))})"
            )
        return None
    if status == "FAILED":
        if kind != "RUN_FAILED":
            return f"{where} says FAILED but the chain ends with {kind or 'no terminal event'}"
        allowed = (
            None,
            {"error": data.get("error"), "message": data.get("message")},
            {"stopped": data.get("message")},
        )
        if all(canonicalize(outcome) != canonicalize(a) for a in allowed):
            return f"{where} outcome {_short(outcome)} disagrees with the chained RUN_FAILED event"
        return None
    if status == "RUNNING":
        return None if outcome is None else f"{where} is RUNNING yet shows an outcome"
    return f"{where} status {_short(status)} is not a run status"


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

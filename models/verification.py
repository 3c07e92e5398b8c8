"""Verification beyond the chain, as pure rules: everything later read as evidence must be what
the chained events say.

The chain (``models.chain``) proves the events; replay, reconciliation and retry also read
payloads held in the artifact store, the artifacts the events point to and the lookup tables
(side effects, approvals, policy decisions, checkpoints, fixtures, …). Each lookup row is
checked against the chained event that recorded it: its key, its sequence, its content hash,
its looked-up columns and its whole record must be what that event's payload says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from models.chain import BreakReason, ChainVerification, VerificationProblem

__all__ = [
    "ExpectedRow",
    "ProjectionRule",
    "compare_row",
    "expected_rows",
    "with_problems",
]

#: the kind of a problem -> the break reason it reports
_REASONS: dict[str, BreakReason] = {
    "payload": BreakReason.ARTIFACT,
    "artifact": BreakReason.ARTIFACT,
    "anchor": BreakReason.ANCHOR,
}


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
    #: looked-up column -> the value the record's JSON gives it
    columns: Callable[[Mapping[str, Any]], dict[str, Any]]
    #: a row later events update (a side effect's status); else the first event wins
    mutable: bool = False


class ExpectedRow(NamedTuple):
    """A lookup row as the chained event that recorded it says it must be (a tuple: one is
    built per lookup row of a run)."""

    key: str
    sequence: int
    content_hash: str
    record: Mapping[str, Any]
    columns: dict[str, Any]


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
        rows[key] = ExpectedRow(key, sequence, payload_hash, payload, rule.columns(payload))
    return rows


def compare_row(
    rule: ProjectionRule,
    expected: ExpectedRow,
    actual: Mapping[str, Any],
    same_record: Callable[[Mapping[str, Any], Mapping[str, Any]], bool],
) -> str | None:
    """The first way the stored row ``actual`` differs from ``expected``, as a sentence, or
    None. ``same_record`` decides record equality when plain equality fails (canonical form)."""
    name = f"{rule.label} {expected.key}"
    for column, value in expected.columns.items():
        stored = actual.get(column)
        if stored != value:
            return f"{name} {column} {stored} disagrees with the chained event ({value})"
    # a checkpoint's row keeps its own sequence (a column above), others the event's
    if "sequence" not in expected.columns and actual.get("sequence") != expected.sequence:
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

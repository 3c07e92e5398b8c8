"""The governance log, as pure rules: who registered which data subject of a run, and who
placed and released which legal hold and evidence freeze, when and why (issue 31).

These rows decide what a deletion reaches and what it must not touch; the SQL rows
(``run_subjects``, ``legal_holds``, ``evidence_freezes``) are what the product reads, and each
one must agree with this log. The log is one global hash chain like the raw-read audit log
(``models.anchor.audit_link``, from its own genesis):

    hash_n = SHA-256( canonical({position: n, previous: hash_{n-1}, record: record_n}) )

so an edited, deleted or reordered entry breaks it, and its head is anchored outside the
database after each hold or freeze entry: a deleted newest entry disagrees with the anchor.
A hold stands until a ``HOLD_RELEASED`` entry (who, when, why) says otherwise; deleting or
releasing the SQL row alone lifts nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from models.anchor import audit_link
from models.base import Identifier, Instant, Record, format_instant
from models.chain import VerificationProblem
from models.digest import sha256_digest

__all__ = [
    "GOVERNANCE_GENESIS",
    "GOVERNANCE_LOG_ID",
    "GovernanceKind",
    "GovernanceRecord",
    "governance_link",
    "merged_reasons",
    "row_problems",
    "standing",
    "verify_governance_chain",
]

GOVERNANCE_GENESIS = sha256_digest(b"replaybook:governance-log:v1")
#: the id under which the log's head is anchored
GOVERNANCE_LOG_ID = "governance:log"


class GovernanceKind(StrEnum):
    SUBJECT_REGISTERED = "SUBJECT_REGISTERED"
    HOLD_PLACED = "HOLD_PLACED"
    HOLD_RELEASED = "HOLD_RELEASED"
    FREEZE_PLACED = "FREEZE_PLACED"
    FREEZE_RELEASED = "FREEZE_RELEASED"


class GovernanceRecord(Record):
    """One entry: what happened to which run, who did it, when and why."""

    kind: GovernanceKind
    run_id: Identifier
    at: Instant
    actor: str
    reason: str = ""
    #: SUBJECT_REGISTERED: the subject as its ``run_subjects`` row holds it
    subject_id: str | None = None
    subject_kind: str | None = None
    source: str | None = None
    primary: bool | None = None
    #: a hold's or freeze's id (and the incident that froze)
    hold_id: str | None = None
    incident_id: str | None = None
    until: Instant | None = None


def governance_link(previous_hash: str, position: int, record: dict[str, Any]) -> str:
    """An entry's hash (the audit log's link formula)."""
    return audit_link(previous_hash, position, record)


def verify_governance_chain(
    rows: Iterable[tuple[int, str, str, dict[str, Any]]],
) -> list[VerificationProblem]:
    """The first problem of the log from ``(position, previous_hash, hash, record)`` rows in
    position order (all of them: a missing position is a deleted entry)."""
    previous, expected = GOVERNANCE_GENESIS, 1
    for position, previous_hash, hash_, record in rows:
        problem = _link_problem(position, expected, previous_hash, previous, hash_, record)
        if problem is not None:
            return [VerificationProblem(sequence=position, kind="governance", message=problem)]
        previous, expected = hash_, expected + 1
    return []


def _link_problem(
    position: int, expected: int, previous_hash: str, previous: str, hash_: str, record: Any
) -> str | None:
    where = f"governance log entry {position}"
    if position != expected:
        return f"governance log entry {expected} is missing (deleted; next is {position})"
    if previous_hash != previous:
        return f"{where} does not link to the entry before it"
    if governance_link(previous_hash, position, record) != hash_:
        return f"{where} was rewritten (it no longer hashes to its link)"
    return None


def standing(entries: Sequence[GovernanceRecord], now: datetime) -> dict[str, GovernanceRecord]:
    """The holds and freezes the log says stand at ``now``, by id: placed, not released (a
    hold's ``until`` passed releases it)."""
    placed: dict[str, GovernanceRecord] = {}
    for entry in entries:
        if entry.kind in (GovernanceKind.HOLD_PLACED, GovernanceKind.FREEZE_PLACED):
            placed[f"{entry.kind}:{entry.hold_id}"] = entry
        elif entry.kind is GovernanceKind.HOLD_RELEASED:
            placed.pop(f"{GovernanceKind.HOLD_PLACED}:{entry.hold_id}", None)
        elif entry.kind is GovernanceKind.FREEZE_RELEASED:
            placed.pop(f"{GovernanceKind.FREEZE_PLACED}:{entry.hold_id}", None)
    return {key: entry for key, entry in placed.items() if entry.until is None or entry.until > now}


def describe(entry: GovernanceRecord) -> str:
    """A standing hold or freeze as a reason a deletion is refused."""
    when = format_instant(entry.at)
    if entry.kind is GovernanceKind.FREEZE_PLACED:
        return f"incident {entry.incident_id} froze its evidence (freeze {entry.hold_id}, {when})"
    return f"legal hold {entry.hold_id} ({entry.reason}; placed by {entry.actor} at {when})"


def merged_reasons(from_rows: Sequence[str], chained: Sequence[str]) -> list[str]:
    """The reasons a run is held per its SQL rows, then those the log adds (a hold or freeze
    whose row is gone or was released in SQL; the log not verifying), each hold once."""
    known = {reason.split(" (")[0] for reason in from_rows}
    return [*from_rows, *(r for r in chained if r.split(" (")[0] not in known)]


def row_problems(
    entries: Sequence[tuple[int, GovernanceRecord]],
    subjects: Iterable[str],
    holds: dict[str, bool],
    freezes: dict[str, bool],
    now: datetime,
) -> list[VerificationProblem]:
    """What the run's SQL rows say against its log entries (``(position, record)``):
    ``subjects``: the subject ids of its ``run_subjects`` rows; ``holds`` / ``freezes``: each
    row's id and whether the row says it was released. A registered subject without a row is
    a deletion that would miss the run; a standing hold or freeze without a row, or released
    in SQL, lifted without a chained release."""
    problems = []
    have = set(subjects)
    released = {
        (e.kind, e.hold_id)
        for _, e in entries
        if e.kind in (GovernanceKind.HOLD_RELEASED, GovernanceKind.FREEZE_RELEASED)
    }
    for position, entry in entries:
        where = f"governance log entry {position}"
        if entry.kind is GovernanceKind.SUBJECT_REGISTERED and entry.subject_id not in have:
            problems.append(
                f"data subject {entry.subject_id} ({where}) has no run_subjects row: its "
                "deletion would miss this run"
            )
            continue
        if entry.kind is GovernanceKind.HOLD_PLACED:
            rows, what, release = holds, f"legal hold {entry.hold_id}", GovernanceKind.HOLD_RELEASED
        elif entry.kind is GovernanceKind.FREEZE_PLACED:
            rows, what, release = freezes, f"freeze {entry.hold_id}", GovernanceKind.FREEZE_RELEASED
        else:
            continue
        if (release, entry.hold_id) in released or (entry.until is not None and entry.until <= now):
            continue  # lifted by a chained release, or its term ended
        if entry.hold_id not in rows:
            problems.append(
                f"{what} ({where}, placed by {entry.actor}) has no row: deleted in SQL, yet "
                "no chained release lifted it"
            )
        elif rows[entry.hold_id]:
            problems.append(f"{what} ({where}) was released in SQL without a chained release")
    return [VerificationProblem(sequence=None, kind="governance", message=p) for p in problems]

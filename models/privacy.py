"""Privacy records and rules (rule 17): data subjects, raw-read audit, legal holds, deletion
receipts, and which subjects a run is about.

A *data subject* is the person or organisation recorded data is about, named
``<kind>:<id>``: ``customer:C-1002`` (the end user), ``tenant:acme``. A run's subjects are
declared at record time: the end user and the tenant the run serves (``RunSubjects``); a
capability whose schema declares personal fields makes a run that calls it carry personal
data of its end user, and a capability declaring ``person_records`` (a CRM lookup) makes
every person whose record the run read a subject of it too (``SubjectKind.PERSON``: the
customer, or a third party such as the wrong recipient). Raw payloads of a run are encrypted under the data key of the run's
*primary* subject (the end user when there is one, else the tenant); a deletion request for
any subject of a run destroys that run's raw content.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field, JsonValue

from models.base import Identifier, Instant, Record, format_instant
from models.capability import PersonRecords

#: the actor and role names the privacy functions check
FORENSIC_ROLE = "forensic"

#: the key scope of raw content sealed for no declared subject (not a person: never deleted)
NO_SUBJECT = "subject:none"

#: labels of a run header that name its subjects
SUBJECT_LABEL = "subject"
TENANT_LABEL = "tenant"


class SubjectKind(StrEnum):
    END_USER = "END_USER"
    TENANT = "TENANT"
    #: a person whose record the run read from a provider (the customer the run is about, or
    #: a third party such as the wrong recipient): the run holds their data
    PERSON = "PERSON"


class RunSubject(Record):
    subject_id: Identifier
    kind: SubjectKind
    #: where the subject was declared: ``label:subject``, ``label:tenant``
    source: str


def run_subjects(labels: Mapping[str, str]) -> tuple[RunSubject, ...]:
    """The subjects a run header declares; the primary one (raw is encrypted under it) first."""
    out = []
    if labels.get(SUBJECT_LABEL):
        out.append(
            RunSubject(
                subject_id=labels[SUBJECT_LABEL],
                kind=SubjectKind.END_USER,
                source=f"label:{SUBJECT_LABEL}",
            )
        )
    if labels.get(TENANT_LABEL):
        out.append(
            RunSubject(
                subject_id=f"tenant:{labels[TENANT_LABEL]}",
                kind=SubjectKind.TENANT,
                source=f"label:{TENANT_LABEL}",
            )
        )
    return tuple(out)


def people_in(records: PersonRecords, value: Any) -> list[tuple[str, tuple[str, ...]]]:
    """(subject id, names) of every person's record inside a provider's result ``value``."""
    found: dict[str, list[str]] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            person = node.get(records.id_field)
            if isinstance(person, str | int) and not isinstance(person, bool) and str(person):
                names = found.setdefault(f"{records.subject_prefix}:{person}", [])
                names += [node[f] for f in records.name_fields if isinstance(node.get(f), str)]
            for child in node.values():
                walk(child)
        elif isinstance(node, list | tuple):
            for child in node:
                walk(child)

    walk(value)
    return [(subject, tuple(names)) for subject, names in found.items()]


def person_subjects(subject_ids: Iterable[str], capability_id: str) -> tuple[RunSubject, ...]:
    return tuple(
        RunSubject(subject_id=s, kind=SubjectKind.PERSON, source=f"provider:{capability_id}")
        for s in subject_ids
    )


class RawReadOutcome(StrEnum):
    READ = "READ"
    DESTROYED = "DESTROYED"
    DENIED = "DENIED"
    NOT_REDACTED = "NOT_REDACTED"


class AuditRecord(Record):
    """One access to raw evidence: who, when, what, why, and what they got."""

    audit_id: Identifier
    actor: Identifier
    role: str
    action: str = "raw_read"
    run_id: Identifier
    sequence: int | None = None
    reason: str
    at: Instant
    outcome: RawReadOutcome
    detail: str | None = None


class LegalHold(Record):
    hold_id: Identifier
    run_id: Identifier
    reason: str = Field(min_length=1)
    placed_by: str
    placed_at: Instant
    until: Instant | None = None
    released_at: Instant | None = None

    def active(self, now: datetime) -> bool:
        return self.released_at is None and (self.until is None or self.until > now)


class DeletionReceipt(Record):
    """Proof that a deletion request was carried out: what was destroyed, when, by which
    request. Kept forever (it holds no personal content, only ids and counts)."""

    request_id: Identifier
    subject_id: Identifier
    executed_at: Instant
    runs: tuple[str, ...] = ()
    raw_payloads_destroyed: int = 0
    raw_objects_deleted: int = 0
    data_keys_destroyed: int = 0
    regression_cases: tuple[str, ...] = ()
    incidents: tuple[str, ...] = ()
    detail: dict[str, JsonValue] = Field(default_factory=dict)


class RawEvidenceState(StrEnum):
    """What a raw read can find for one payload."""

    #: redaction changed nothing: the stored payload is the raw payload
    SAME_AS_SANITIZED = "SAME_AS_SANITIZED"
    AVAILABLE = "AVAILABLE"
    DESTROYED = "DESTROYED"
    #: recorded before raw/sanitized separation, or raw never kept
    NOT_RECORDED = "NOT_RECORDED"


class RawEvidence(Record):
    run_id: Identifier
    sequence: int | None
    state: RawEvidenceState
    raw_hash: str | None = None
    sanitized_hash: str | None = None
    redaction_policy_version: str | None = None
    subject_id: str | None = None
    destroyed_at: Instant | None = None
    destroyed_by_request: str | None = None
    content: Any = None

    def destroyed_message(self) -> str:
        return (
            f"raw content of {self.run_id}#{self.sequence} was destroyed by deletion request "
            f"{self.destroyed_by_request} at "
            f"{format_instant(self.destroyed_at) if self.destroyed_at else '?'}"
        )


# destruction of raw content, as the audit chain records it ----------------------------------

#: the audit action of a destruction of raw content (a deletion request, or retention)
RAW_DESTROYED = "raw_destroyed"
#: the role a destruction is recorded under
PRIVACY_ROLE = "privacy"


class RawDeletion(Record):
    """One run's part of a destruction of raw content, chained in the audit log (who, when,
    which request) in the transaction that destroys it: every destroyed raw-payload row must
    name a recorded deletion of its run, so a forged one (ciphertext set to NULL under an
    invented request) is detected by ``runs verify``."""

    request_id: Identifier
    run_id: Identifier
    subject_id: str | None = None
    #: raw-payload rows of the run's events destroyed (what ``runs verify`` counts)
    event_payloads: int = Field(ge=0)
    #: every raw-payload row destroyed, the raw forms of artifacts included
    raw_payloads: int = Field(ge=0)
    data_keys: int = Field(ge=0)

    def audit(self, audit_id: str, actor: str, at: datetime) -> AuditRecord:
        return AuditRecord(
            audit_id=audit_id,
            actor=actor or "unknown",
            role=PRIVACY_ROLE,
            action=RAW_DESTROYED,
            run_id=self.run_id,
            reason=f"request {self.request_id}",
            at=at,
            outcome=RawReadOutcome.DESTROYED,
            detail=self.model_dump_json(),
        )


def raw_deletion(record: Mapping[str, Any]) -> tuple[RawDeletion, datetime] | None:
    """The deletion an audit record (as stored, a dict) chains, with its time; None for any
    other record (a raw read) or one that does not parse."""
    if record.get("action") != RAW_DESTROYED:
        return None
    try:
        audit = AuditRecord.model_validate(record)
        return RawDeletion.model_validate_json(audit.detail or ""), audit.at
    except ValueError:
        return None


@dataclass(frozen=True)
class RawRowState:
    """A run's raw-payload row of one event, reduced to what the destruction checks read."""

    sequence: int
    redacted: bool  # raw_hash differs from sanitized_hash
    has_ciphertext: bool
    destroyed_at: datetime | None
    destroyed_by_request: str | None


def raw_row_problems(
    run_id: str,
    rows: Sequence[RawRowState],
    deletions: Sequence[tuple[RawDeletion, datetime]],
    redacted_events: Iterable[int],
) -> list[tuple[int, str]]:
    """(sequence, message) of every raw-payload row whose destruction no chained deletion of
    ``run_id`` accounts for (invented request, other time, more rows than the request
    destroyed), every redacted row that lost its ciphertext with no destruction at all, and
    every event in ``redacted_events`` (its stored payload holds a pseudonym) without a row."""
    problems: list[tuple[int, str]] = []
    recorded = {d.request_id: (d, at) for d, at in deletions if d.run_id == run_id}
    destroyed: dict[str, list[int]] = {}
    for row in rows:
        what = f"raw payload of sequence {row.sequence}"
        if row.destroyed_by_request is None and row.destroyed_at is None:
            if row.redacted and not row.has_ciphertext:
                problems.append(
                    (
                        row.sequence,
                        f"{what} has no encrypted raw content and was destroyed by no request "
                        "(raw evidence lost)",
                    )
                )
            continue
        request = row.destroyed_by_request or "?"
        found = recorded.get(request)
        if found is None:
            problems.append(
                (
                    row.sequence,
                    f"{what} says it was destroyed by request {request}, but the audit chain "
                    f"records no deletion of run {run_id} by it (forged deletion)",
                )
            )
        elif row.destroyed_at is None or row.destroyed_at != found[1]:
            problems.append(
                (
                    row.sequence,
                    f"{what} says it was destroyed by request {request} at "
                    f"{format_instant(row.destroyed_at) if row.destroyed_at else '?'}; the "
                    f"audit chain records that deletion at {format_instant(found[1])}",
                )
            )
        else:
            destroyed.setdefault(request, []).append(row.sequence)
    for request, sequences in destroyed.items():
        expected = recorded[request][0].event_payloads
        if len(sequences) != expected:
            problems.append(
                (
                    min(sequences),
                    f"{len(sequences)} raw payloads of run {run_id} say request {request} "
                    f"destroyed them; the audit chain records {expected} (forged deletion)",
                )
            )
    have = {row.sequence for row in rows}
    problems += [
        (
            sequence,
            f"raw payload of sequence {sequence} is missing: its sanitized view holds "
            "pseudonyms, so its raw form was recorded (raw-payload row deleted)",
        )
        for sequence in redacted_events
        if sequence not in have
    ]
    return sorted(problems)

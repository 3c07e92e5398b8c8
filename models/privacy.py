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

from collections.abc import Iterable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field, JsonValue

from models.base import Identifier, Instant, Record, format_instant
from models.capability import PersonRecords

#: the actor and role names the privacy functions check
FORENSIC_ROLE = "forensic"

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

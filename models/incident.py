"""Incident records: evidence freezes and the forensic report."""

from __future__ import annotations

from pydantic import Field, JsonValue, field_validator

from models.base import Digest, HashedRecord, Identifier, Instant, Record
from models.enums import AgentFailureType, EvidenceType
from models.replay import ReplayResult, TrajectoryDiff


class EvidenceFreezeRequest(Record):
    """Freeze a run's evidence of the given types until ``retention_until``."""

    run_id: Identifier
    incident_id: Identifier
    types: tuple[EvidenceType, ...] = Field(min_length=1)
    retention_until: Instant

    @field_validator("types")
    @classmethod
    def _sorted_unique(cls, types: tuple[EvidenceType, ...]) -> tuple[EvidenceType, ...]:
        # a set in the seed; kept sorted so that equal requests serialise (and hash) equally
        return tuple(sorted(set(types)))


class EvidenceRef(Record):
    type: EvidenceType
    ref: str
    content_hash: Digest


class FailureForensicsReport(HashedRecord):
    incident_id: Identifier
    source_run_id: Identifier
    failure_signature: str
    #: the incident's failure type: the human's when ``failure_type_confirmed``, else the
    #: automatic classification's (``automatic_failure_type``, always kept)
    failure_type: AgentFailureType | None = None
    failure_type_confirmed: bool = False
    automatic_failure_type: AgentFailureType | None = None
    evidence: tuple[EvidenceRef, ...] = ()
    replays: tuple[ReplayResult, ...] = ()
    critical_diffs: tuple[TrajectoryDiff, ...] = ()
    #: only ever a human's confirmation (rule 18); None until confirmed
    confirmed_root_cause: str | None = None
    fix_version: str | None = None
    verified_by: str | None = None
    generated_at: Instant | None = None


class StoredIncident(Record):
    """An incident as the incident store keeps it: the looked-up columns and the caller's
    ``record`` (the workflow's own view). ``signature`` and ``failure_type`` are None until
    the incident is signed."""

    incident_id: Identifier
    source_run_id: Identifier
    failure_type: AgentFailureType | None = None
    signature: str | None = None
    signature_key: str | None = None
    phase: str
    created_at: Instant
    updated_at: Instant
    record: dict[str, JsonValue] = Field(default_factory=dict)

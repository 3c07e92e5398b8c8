"""Evidence freezes: what an incident put beyond deletion, and the chain head it saw (pure).

A freeze holds every artifact a run's evidence points to (legal hold on, retention until
``retention_until``) and names the run's chain head at freeze time, so a later reader can tell
whether the chain still ends where it ended when the incident froze it. ``missing_digests``
lists digests the evidence points to that were not in the store when it was frozen: missing
evidence is reported, never hidden (rule 14).
"""

from __future__ import annotations

from pydantic import Field, field_validator

from models.base import Digest, HashedRecord, Identifier, Instant
from models.enums import EvidenceType


class FreezeRecord(HashedRecord):
    freeze_id: Identifier
    incident_id: Identifier
    run_id: Identifier
    types: tuple[EvidenceType, ...] = Field(min_length=1)
    retention_until: Instant
    #: the chain head when the freeze verified the run (0 and the genesis hash for no events)
    chain_head_sequence: int = Field(ge=0)
    chain_head_hash: Digest
    #: every artifact put on legal hold and retention, sorted
    artifact_digests: tuple[Digest, ...] = ()
    #: referenced by the evidence but absent from the store at freeze time, sorted
    missing_digests: tuple[Digest, ...] = ()
    #: True when the store itself refuses deletion (S3 Object Lock), not only Replaybook's code
    enforced_by_backend: bool
    created_at: Instant
    #: set when the freeze is released; the artifacts' own holds are separate
    released_at: Instant | None = None

    @field_validator("types")
    @classmethod
    def _sorted_types(cls, types: tuple[EvidenceType, ...]) -> tuple[EvidenceType, ...]:
        return tuple(sorted(set(types)))

    @field_validator("artifact_digests", "missing_digests")
    @classmethod
    def _sorted_digests(cls, digests: tuple[str, ...]) -> tuple[str, ...]:
        # a set; kept sorted so that the same freeze serialises (and hashes) the same way
        return tuple(sorted(set(digests)))

    @property
    def artifact_count(self) -> int:
        return len(self.artifact_digests)

    @property
    def active(self) -> bool:
        return self.released_at is None

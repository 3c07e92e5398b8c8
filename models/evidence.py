"""Evidence records: what the agent saw and did at each boundary crossing."""

from __future__ import annotations

from pydantic import Field, JsonValue

from models.base import Digest, HashedRecord, Identifier, Instant, Record
from models.enums import (
    ApprovalDecision,
    PolicyDecision,
    SideEffectClass,
    SideEffectStatus,
    ToolOutcome,
)


class ArtifactRef(Record):
    """A versioned artifact (patch, CSV, report, image) referenced by content, never by path."""

    artifact_id: Identifier
    version: int = Field(ge=1)
    content_hash: Digest
    media_type: str = "application/octet-stream"
    size: int | None = Field(default=None, ge=0)


class ToolFixture(HashedRecord):
    """One tool call as recorded: replay answers a request with the same ``request_hash``."""

    tool_call_id: Identifier
    capability_id: Identifier
    request_hash: Digest
    sanitized_request: JsonValue
    sanitized_response: JsonValue
    outcome: ToolOutcome
    started_at: Instant
    completed_at: Instant | None = None
    provider_request_id: str | None = None
    run_id: Identifier | None = None
    step_id: str | None = None
    side_effect_class: SideEffectClass = SideEffectClass.WRITE


class SideEffectRecord(HashedRecord):
    """A write to the outside world and what is known of its outcome (rule 5)."""

    side_effect_id: Identifier
    run_id: Identifier
    step_id: str
    capability_id: Identifier
    idempotency_key: Identifier
    action_hash: Digest
    status: SideEffectStatus
    provider_receipt: str | None = None
    executed_at: Instant | None = None
    provider_request_id: str | None = None
    #: set when status is RECONCILED: whether reconciliation proved the effect applied
    reconciled_applied: bool | None = None


class PromptArtifact(HashedRecord):
    """The compiled prompt the model saw: the text is stored by ``content_ref``, hashed here."""

    artifact_id: Identifier
    template_version: Identifier
    compiled_hash: Digest
    content_ref: str
    token_count: int = Field(ge=0)
    compiled_at: Instant


class ContextSnapshot(HashedRecord):
    """Everything besides the prompt that went into a model call."""

    snapshot_id: Identifier
    run_id: Identifier
    step_id: str
    message_refs: tuple[str, ...] = ()
    evidence_refs: tuple[str, ...] = ()
    memory_refs: tuple[str, ...] = ()
    tool_catalog_hash: Digest
    state_hash: Digest
    content_hash: Digest


class RetrievedEvidence(Record):
    """One retrieved chunk, pinned by document version and chunk hash (rule 10)."""

    document_id: Identifier
    document_version: str
    chunk_id: Identifier
    chunk_hash: Digest
    rank: int = Field(ge=0)
    score: float


class RetrievalFixture(HashedRecord):
    query_hash: Digest
    retriever_version: Identifier
    evidence: tuple[RetrievedEvidence, ...] = ()
    run_id: Identifier | None = None
    step_id: str | None = None


class PolicyDecisionRecord(HashedRecord):
    """A policy decision with its input, so a new policy can be replayed on the same input."""

    policy_id: Identifier
    policy_version: Identifier
    input_hash: Digest
    sanitized_input: JsonValue
    decision: PolicyDecision
    reasons: tuple[str, ...] = ()
    run_id: Identifier | None = None
    step_id: str | None = None


class ApprovalRecord(HashedRecord):
    """A human approval bound to one action hash, with its validity window."""

    approval_id: Identifier
    approver: Identifier
    action_hash: Digest
    decision: ApprovalDecision = ApprovalDecision.APPROVED
    approved_at: Instant
    expires_at: Instant | None = None
    run_id: Identifier | None = None
    step_id: str | None = None

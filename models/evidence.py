"""Evidence records: what the agent saw and did at each boundary crossing."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import (
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from models.base import Digest, HashedRecord, Identifier, Instant, Record
from models.enums import (
    ApprovalDecision,
    PolicyDecision,
    SideEffectClass,
    SideEffectStatus,
    ToolOutcome,
)
from models.errors import IntegrityError


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
    """Everything besides the prompt that went into a model call.

    A conversation's messages need not be listed again on every call (that makes a run's
    evidence grow with the square of its length): ``prefix_snapshot_id`` may name an earlier
    snapshot of the same run whose first ``prefix_messages`` messages come first, followed by
    ``message_refs`` (``context_message_refs`` resolves it). ``content_hash`` is always the
    hash of the whole request, so either form pins the exact context. A snapshot without a
    prefix serializes exactly as before the prefix existed (its hash is unchanged)."""

    snapshot_id: Identifier
    run_id: Identifier
    step_id: str
    message_refs: tuple[str, ...] = ()
    evidence_refs: tuple[str, ...] = ()
    memory_refs: tuple[str, ...] = ()
    tool_catalog_hash: Digest
    state_hash: Digest
    content_hash: Digest
    prefix_snapshot_id: Identifier | None = None
    prefix_messages: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _prefix_whole(self) -> ContextSnapshot:
        if (self.prefix_snapshot_id is None) != (self.prefix_messages == 0):
            raise ValueError("prefix_snapshot_id and prefix_messages go together")
        return self

    @model_serializer(mode="wrap")
    def _prefix_only_when_set(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if self.prefix_snapshot_id is None and not self.prefix_messages and isinstance(data, dict):
            del data["prefix_snapshot_id"], data["prefix_messages"]
        return data

    @property
    def message_count(self) -> int:
        """How many messages the context has (the prefix's and its own)."""
        return self.prefix_messages + len(self.message_refs)


def resolvable_snapshots(snapshots: Iterable[ContextSnapshot]) -> set[str]:
    """The ids of ``snapshots`` (a run's, in recording order) whose whole message list can be
    resolved: no prefix, or a prefix of at most as many messages of an earlier resolvable
    snapshot of the same run. Counts only: linear in the number of snapshots."""
    counts: dict[str, int] = {}
    for snapshot in snapshots:
        base = snapshot.prefix_snapshot_id
        if base is None or snapshot.prefix_messages <= counts.get(base, -1):
            counts[snapshot.snapshot_id] = snapshot.message_count
    return set(counts)


def context_message_refs(
    snapshot: ContextSnapshot, earlier: Mapping[str, ContextSnapshot]
) -> tuple[str, ...]:
    """The whole message list of ``snapshot``: its prefix followed from snapshot to snapshot
    through ``earlier`` (the run's snapshots by id). ``IntegrityError`` when a prefix names a
    snapshot that is not there (or of another run, or a cycle) or has fewer messages."""
    parts: list[tuple[str, ...]] = []
    current, need = snapshot, snapshot.message_count
    seen = {snapshot.snapshot_id}
    while True:
        prefix = current.prefix_messages
        if need > prefix:
            parts.append(current.message_refs[: need - prefix])
        need = min(need, prefix)
        if not need:
            break
        base = earlier.get(current.prefix_snapshot_id or "")
        if base is None or base.run_id != snapshot.run_id or base.snapshot_id in seen:
            raise IntegrityError(
                f"context snapshot {current.snapshot_id!r} continues "
                f"{current.prefix_snapshot_id!r}, which is not an earlier snapshot of its run"
            )
        if base.message_count < need:
            raise IntegrityError(
                f"context snapshot {current.snapshot_id!r} continues {need} messages of "
                f"{base.snapshot_id!r}, which has {base.message_count}"
            )
        seen.add(base.snapshot_id)
        current = base
    return tuple(ref for part in reversed(parts) for ref in part)


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

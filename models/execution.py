"""The execution timeline: runs, hash-chained events, checkpoints and pinned environments."""

from __future__ import annotations

from pydantic import Field, JsonValue

from models.base import Digest, HashedRecord, Identifier, Instant, Record
from models.enums import ExecutionEventType, RetentionClass, RunStatus


class ExecutionEvent(HashedRecord):
    """One link of a run's hash chain (rule 8).

    ``sequence`` orders the run (rule 7); ``logical_time`` is the agent's clock, ``recorded_at``
    the ledger's wall clock; they are separate on purpose. ``hash`` is
    ``SHA-256(previous_hash ‖ canonical(metadata) ‖ payload_hash)``, see ``models.chain``.
    """

    sequence: int = Field(ge=1)
    event_id: Identifier
    run_id: Identifier
    step_id: str
    type: ExecutionEventType
    payload_ref: str
    payload_hash: Digest
    previous_hash: Digest
    hash: Digest
    logical_time: Instant
    recorded_at: Instant


class ReplayCheckpoint(HashedRecord):
    """Agent state after a step, so a replay can fork from it."""

    run_id: Identifier
    step_id: str
    sequence: int = Field(ge=0)
    state_ref: str
    state_hash: Digest
    context_snapshot_id: str | None = None
    logical_time: Instant
    state_schema_version: int = Field(default=1, ge=1)


class EnvironmentManifest(HashedRecord):
    """What the run executed on; its content hash is the run's environment hash."""

    container_image_digest: str | None = None
    os_image: str | None = None
    jdk_version: str | None = None
    python_version: str | None = None
    dependency_lock_hash: Digest | None = None
    tool_bundle_hash: Digest | None = None


class SourceCodeManifest(HashedRecord):
    """Source state of a coding agent or of the agent's own code."""

    base_commit: str | None = None
    head_commit: str | None = None
    working_tree_patch_hash: Digest | None = None
    dependency_lock_hash: Digest | None = None
    toolchain_version: str | None = None


class PinnedVersions(Record):
    """Every version a run depends on (rule 9). ``None`` means it was not recorded."""

    model_profile: str | None = None
    prompt_bundle_hash: Digest | None = None
    policy_version: str | None = None
    capability_registry_version: str | None = None
    knowledge_snapshot: str | None = None
    evaluator_version: str | None = None
    redaction_policy_version: str | None = None
    environment_hash: Digest | None = None


class RunRecord(Record):
    """A recorded agent run. Its events live in the ledger; this is the header."""

    run_id: Identifier
    graph_id: Identifier
    graph_version: Identifier
    status: RunStatus = RunStatus.RUNNING
    outcome: JsonValue = None
    pinned: PinnedVersions = PinnedVersions()
    environment: EnvironmentManifest | None = None
    source_code: SourceCodeManifest | None = None
    retention_class: RetentionClass = RetentionClass.STANDARD
    created_at: Instant
    labels: dict[str, str] = Field(default_factory=dict)

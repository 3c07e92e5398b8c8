"""Pure records and rules of Replaybook: no I/O here (a test enforces it).

The names below are loaded on first use (PEP 562): ``import models.errors`` — which every
command line module needs — then does not build every pydantic record, and ``replaybook
--help`` stays quick."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from models.base import HashedRecord, Instant, Record, format_instant
    from models.digest import Digest, sha256_digest
    from models.enums import (
        AgentFailureType,
        ApprovalDecision,
        DiffType,
        EvidenceType,
        ExecutionEventType,
        FixtureMissPolicy,
        PolicyDecision,
        ReplayConfidence,
        ReplayMode,
        ReplayStatus,
        RetentionClass,
        RunStatus,
        SideEffectClass,
        SideEffectStatus,
        ToolOutcome,
    )
    from models.evidence import (
        ApprovalRecord,
        ArtifactRef,
        ContextSnapshot,
        PolicyDecisionRecord,
        PromptArtifact,
        RetrievalFixture,
        RetrievedEvidence,
        SideEffectRecord,
        ToolFixture,
    )
    from models.execution import (
        EnvironmentManifest,
        ExecutionEvent,
        PinnedVersions,
        ReplayCheckpoint,
        RunRecord,
        SourceCodeManifest,
    )
    from models.incident import EvidenceFreezeRequest, EvidenceRef, FailureForensicsReport
    from models.replay import (
        ReplayBudget,
        ReplayComparison,
        ReplayManifest,
        ReplayRequest,
        ReplayResult,
        TrajectoryDiff,
    )

#: name -> the module defining it
_HOME = {
    "HashedRecord": "models.base",
    "Instant": "models.base",
    "Record": "models.base",
    "format_instant": "models.base",
    "Digest": "models.digest",
    "sha256_digest": "models.digest",
    "AgentFailureType": "models.enums",
    "ApprovalDecision": "models.enums",
    "DiffType": "models.enums",
    "EvidenceType": "models.enums",
    "ExecutionEventType": "models.enums",
    "FixtureMissPolicy": "models.enums",
    "PolicyDecision": "models.enums",
    "ReplayConfidence": "models.enums",
    "ReplayMode": "models.enums",
    "ReplayStatus": "models.enums",
    "RetentionClass": "models.enums",
    "RunStatus": "models.enums",
    "SideEffectClass": "models.enums",
    "SideEffectStatus": "models.enums",
    "ToolOutcome": "models.enums",
    "ApprovalRecord": "models.evidence",
    "ArtifactRef": "models.evidence",
    "ContextSnapshot": "models.evidence",
    "PolicyDecisionRecord": "models.evidence",
    "PromptArtifact": "models.evidence",
    "RetrievalFixture": "models.evidence",
    "RetrievedEvidence": "models.evidence",
    "SideEffectRecord": "models.evidence",
    "ToolFixture": "models.evidence",
    "EnvironmentManifest": "models.execution",
    "ExecutionEvent": "models.execution",
    "PinnedVersions": "models.execution",
    "ReplayCheckpoint": "models.execution",
    "RunRecord": "models.execution",
    "SourceCodeManifest": "models.execution",
    "EvidenceFreezeRequest": "models.incident",
    "EvidenceRef": "models.incident",
    "FailureForensicsReport": "models.incident",
    "ReplayBudget": "models.replay",
    "ReplayComparison": "models.replay",
    "ReplayManifest": "models.replay",
    "ReplayRequest": "models.replay",
    "ReplayResult": "models.replay",
    "TrajectoryDiff": "models.replay",
}


def __getattr__(name: str) -> Any:
    try:
        home = _HOME[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "AgentFailureType",
    "ApprovalDecision",
    "ApprovalRecord",
    "ArtifactRef",
    "ContextSnapshot",
    "DiffType",
    "Digest",
    "EnvironmentManifest",
    "EvidenceFreezeRequest",
    "EvidenceRef",
    "EvidenceType",
    "ExecutionEvent",
    "ExecutionEventType",
    "FailureForensicsReport",
    "FixtureMissPolicy",
    "HashedRecord",
    "Instant",
    "PinnedVersions",
    "PolicyDecision",
    "PolicyDecisionRecord",
    "PromptArtifact",
    "Record",
    "ReplayBudget",
    "ReplayCheckpoint",
    "ReplayComparison",
    "ReplayConfidence",
    "ReplayManifest",
    "ReplayMode",
    "ReplayRequest",
    "ReplayResult",
    "ReplayStatus",
    "RetentionClass",
    "RetrievalFixture",
    "RetrievedEvidence",
    "RunRecord",
    "RunStatus",
    "SideEffectClass",
    "SideEffectRecord",
    "SideEffectStatus",
    "SourceCodeManifest",
    "ToolFixture",
    "ToolOutcome",
    "TrajectoryDiff",
    "format_instant",
    "sha256_digest",
]

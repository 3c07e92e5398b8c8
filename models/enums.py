"""Enumerations of the evidence model. Values are the seed's names and are persisted: never rename."""

from __future__ import annotations

from enum import StrEnum


class ReplayMode(StrEnum):
    #: zero model calls: responses come from the recording (checks code and graph reproduce the run)
    RECORDED = "RECORDED"
    EXACT = "EXACT"
    MODEL_SWAP = "MODEL_SWAP"
    PROMPT_SWAP = "PROMPT_SWAP"
    FORK_FROM_STEP = "FORK_FROM_STEP"


class ToolOutcome(StrEnum):
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"
    TIMEOUT = "TIMEOUT"
    #: the call was sent but its result never came back (lost response)
    UNKNOWN = "UNKNOWN"
    DENIED = "DENIED"
    STUBBED = "STUBBED"
    DRY_RUN = "DRY_RUN"


class FixtureMissPolicy(StrEnum):
    FAIL = "FAIL"
    STUB = "STUB"
    SANDBOX_LIVE = "SANDBOX_LIVE"


class SideEffectStatus(StrEnum):
    PLANNED = "PLANNED"
    EXECUTING = "EXECUTING"
    CONFIRMED = "CONFIRMED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"
    RECONCILED = "RECONCILED"


class SideEffectClass(StrEnum):
    READ = "READ"
    WRITE = "WRITE"


class ExecutionEventType(StrEnum):
    RUN_STARTED = "RUN_STARTED"
    STEP_STARTED = "STEP_STARTED"
    STEP_COMPLETED = "STEP_COMPLETED"
    MODEL_CALL = "MODEL_CALL"
    PROMPT_COMPILED = "PROMPT_COMPILED"
    CONTEXT_SNAPSHOT = "CONTEXT_SNAPSHOT"
    TOOL_CALL = "TOOL_CALL"
    RETRIEVAL = "RETRIEVAL"
    POLICY_DECISION = "POLICY_DECISION"
    APPROVAL = "APPROVAL"
    SIDE_EFFECT = "SIDE_EFFECT"
    CHECKPOINT = "CHECKPOINT"
    CLOCK_READ = "CLOCK_READ"
    RANDOM_DRAW = "RANDOM_DRAW"
    STATE_MIGRATION = "STATE_MIGRATION"
    ARTIFACT = "ARTIFACT"
    #: the runtime refused an action (policy DENY, missing/expired/mismatched approval)
    ACTION_REFUSED = "ACTION_REFUSED"
    #: replay only: a WRITE the agent attempted, answered from the recording or dry-run, never executed
    WRITE_BLOCKED = "WRITE_BLOCKED"
    #: replay only: a request with no recorded fixture, and what the miss policy did about it
    FIXTURE_MISS = "FIXTURE_MISS"
    #: an imported span or event Replaybook could not interpret, kept rather than dropped
    OPAQUE = "OPAQUE"
    RUN_COMPLETED = "RUN_COMPLETED"
    RUN_FAILED = "RUN_FAILED"


class EvidenceType(StrEnum):
    EVENT = "EVENT"
    TRACE = "TRACE"
    PROMPT = "PROMPT"
    CONTEXT = "CONTEXT"
    TOOL_FIXTURE = "TOOL_FIXTURE"
    RETRIEVAL = "RETRIEVAL"
    POLICY_DECISION = "POLICY_DECISION"
    ARTIFACT = "ARTIFACT"
    #: the runtime refused an action (policy DENY, missing/expired/mismatched approval)
    ACTION_REFUSED = "ACTION_REFUSED"
    #: replay only: a WRITE the agent attempted, answered from the recording or dry-run, never executed
    WRITE_BLOCKED = "WRITE_BLOCKED"
    #: replay only: a request with no recorded fixture, and what the miss policy did about it
    FIXTURE_MISS = "FIXTURE_MISS"
    APPROVAL = "APPROVAL"
    AUTHORITY = "AUTHORITY"
    SIDE_EFFECT_RECEIPT = "SIDE_EFFECT_RECEIPT"


class ReplayStatus(StrEnum):
    CREATED = "CREATED"
    PREPARING = "PREPARING"
    RUNNING = "RUNNING"
    COMPARING = "COMPARING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"


class ReplayConfidence(StrEnum):
    #: every evidence item was present (6/6)
    FULL = "FULL"
    #: some evidence was missing: never reported as an exact replay (rule 14)
    LIMITED = "LIMITED"


class ReplayVerdict(StrEnum):
    """What one replay showed about the incident (issue 16): a replay that did not reach the
    point where the failure happened shows nothing either way."""

    REPRODUCED = "REPRODUCED"
    NOT_REPRODUCED = "NOT_REPRODUCED"
    #: stopped before its end (fixture miss, budget, sandbox, step error): counted apart
    INCONCLUSIVE = "INCONCLUSIVE"


class InconclusiveReason(StrEnum):
    """Why a replay is INCONCLUSIVE."""

    FIXTURE_MISS = "FIXTURE_MISS"
    BUDGET = "BUDGET"
    SANDBOX_VIOLATION = "SANDBOX_VIOLATION"
    STEP_ERROR = "STEP_ERROR"
    #: the replay never ran: PREPARING refused it
    PREPARING = "PREPARING"


class DiffType(StrEnum):
    MODEL_DECISION_CHANGED = "MODEL_DECISION_CHANGED"
    TOOL_CHANGED = "TOOL_CHANGED"
    ARGUMENT_CHANGED = "ARGUMENT_CHANGED"
    POLICY_CHANGED = "POLICY_CHANGED"
    OUTCOME_CHANGED = "OUTCOME_CHANGED"
    SIDE_EFFECT_ADDED = "SIDE_EFFECT_ADDED"
    SIDE_EFFECT_REMOVED = "SIDE_EFFECT_REMOVED"
    SIDE_EFFECT_CHANGED = "SIDE_EFFECT_CHANGED"
    APPROVAL_CHANGED = "APPROVAL_CHANGED"
    RETRIEVAL_CHANGED = "RETRIEVAL_CHANGED"
    ANSWER_CHANGED = "ANSWER_CHANGED"
    #: the compiled prompt recompiled with today's code differs from the recorded one
    PROMPT_DRIFT = "PROMPT_DRIFT"
    #: a candidate swapped in (a tool-loop run's system prompt or tool catalogue): what the
    #: replay was given, not how it behaved
    CANDIDATE_CHANGED = "CANDIDATE_CHANGED"
    #: the replay worker's environment or source manifest differs from the recorded one
    ENVIRONMENT_DRIFT = "ENVIRONMENT_DRIFT"


class AgentFailureType(StrEnum):
    MODEL_DECISION = "MODEL_DECISION"
    PROMPT = "PROMPT"
    RETRIEVAL = "RETRIEVAL"
    TOOL = "TOOL"
    AUTHORITY = "AUTHORITY"
    APPROVAL = "APPROVAL"
    SIDE_EFFECT = "SIDE_EFFECT"
    STATE = "STATE"
    CONCURRENCY = "CONCURRENCY"
    INFRASTRUCTURE = "INFRASTRUCTURE"
    POLICY = "POLICY"
    DATA = "DATA"


class RetentionClass(StrEnum):
    """How long evidence is kept; durations live in ``models.retention.RETENTION_PERIODS``."""

    EPHEMERAL = "EPHEMERAL"
    STANDARD = "STANDARD"
    INCIDENT = "INCIDENT"
    REGULATORY = "REGULATORY"


class PolicyDecision(StrEnum):
    ALLOW = "ALLOW"
    DENY = "DENY"
    REQUIRE_APPROVAL = "REQUIRE_APPROVAL"


class ApprovalDecision(StrEnum):
    APPROVED = "APPROVED"
    DENIED = "DENIED"


class RunStatus(StrEnum):
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"

"""A run's behaviour reduced to what behavioural equivalence compares (rule 13).

Both a source run and a replay are read into a ``Trajectory`` (``runtime.trajectory``);
``models.comparison`` compares two of them.
"""

from __future__ import annotations

from pydantic import JsonValue

from models.base import Record


class ModelDecision(Record):
    """One model call: which tools it asked for, and its text answer."""

    step_id: str
    tool_names: tuple[str, ...] = ()
    #: canonical hash of each requested tool call's arguments, aligned with ``tool_names``
    argument_hashes: tuple[str, ...] = ()
    content: str | None = None


class ToolCallFact(Record):
    step_id: str
    capability_id: str
    request_hash: str
    arguments: JsonValue = None
    outcome: str
    side_effect_class: str


class SideEffectFact(Record):
    """A write: for a source run one that was executed (final status), for a replay one the
    agent attempted and the runtime blocked (status ``BLOCKED``)."""

    step_id: str
    capability_id: str
    action_hash: str
    arguments: JsonValue = None
    status: str


class PolicyFact(Record):
    step_id: str
    policy_id: str
    input_hash: str
    decision: str


class ApprovalFact(Record):
    """An approval the run was given (or refused) for one action."""

    step_id: str
    action_hash: str
    decision: str
    approver: str = ""


class RetrievalFact(Record):
    """What one retrieval returned: chunk ids in rank order, and the retriever's version."""

    step_id: str
    query_hash: str
    retriever_version: str = ""
    chunks: tuple[str, ...] = ()


class PromptDriftFact(Record):
    """An EXACT replay's model call whose prompt today's code compiles differently from the
    recorded one it was sent: both compiled hashes, both texts' artifacts, a unified diff."""

    step_id: str
    template: str = ""
    recorded_template: str = ""
    recorded_hash: str
    recompiled_hash: str
    recorded_ref: str = ""
    recompiled_ref: str = ""
    diff: str = ""


class CandidateFact(Record):
    """A candidate a replay was given instead of the source's (a tool-loop run's system prompt
    or tool catalogue): both artifact digests and a unified diff of the texts."""

    kind: str
    source_hash: str | None = None
    candidate_hash: str
    diff: str = ""


class Trajectory(Record):
    run_id: str
    #: step ids in execution order
    steps: tuple[str, ...] = ()
    model_decisions: tuple[ModelDecision, ...] = ()
    tool_calls: tuple[ToolCallFact, ...] = ()
    side_effects: tuple[SideEffectFact, ...] = ()
    policy_decisions: tuple[PolicyFact, ...] = ()
    approvals: tuple[ApprovalFact, ...] = ()
    retrievals: tuple[RetrievalFact, ...] = ()
    #: replays only (EXACT): where today's compiled prompt differs from the recorded one
    prompt_drifts: tuple[PromptDriftFact, ...] = ()
    #: what the replay was given instead of the source's (``CandidateFact``)
    candidates: tuple[CandidateFact, ...] = ()
    outcome: JsonValue = None
    #: the last text the model produced (what the user would read)
    final_answer: str | None = None
    completed: bool = True
    #: the run's input as recorded (sanitized view); expectations may refer to it
    input: JsonValue = None

"""Reading a recorded run (source or replay) from the ledger into a ``Trajectory``.

Only the ``EventLedger`` port is used (no SQL here), so any ledger implementation works. What
is read, per event type (payloads are the runtime's canonical JSON):

- ``STEP_STARTED``: the step sequence, in ledger order (the event's ``step_id`` is the step).
- ``MODEL_CALL``: one ``ModelDecision``: requested tool names, the canonical hash of each
  tool call's arguments, and the response text; an EXACT replay's ``prompt_drift`` (today's
  compiled prompt differs from the recorded one it sent) as a ``PromptDriftFact``.
- ``TOOL_CALL``: one ``ToolCallFact`` from the recorded ``ToolFixture``.
- ``SIDE_EFFECT``: one fact per ``side_effect_id`` with its last status (a run's effects are
  recorded once per status transition); its arguments are those of the ``TOOL_CALL`` fixture
  filed under the same ``provider_request_id``.
- ``WRITE_BLOCKED`` (replays): one fact per event, status ``BLOCKED``.
- ``POLICY_DECISION``: one ``PolicyFact``.
- ``RUN_COMPLETED`` / ``RUN_FAILED``: the outcome; a run with neither is partial.

A run holds both kinds of write facts only if a replay really executed a write (e.g. a
sandbox-live miss policy); each is kept, in the order it first appears.
"""

from __future__ import annotations

import json
from typing import Any

from models import ExecutionEventType
from models.canonical import canonical_hash
from models.trajectory import (
    ApprovalFact,
    CandidateFact,
    ModelDecision,
    PolicyFact,
    PromptDriftFact,
    RetrievalFact,
    SideEffectFact,
    ToolCallFact,
    Trajectory,
)
from runtime.ports import EventLedger
from runtime.turns import in_turns

__all__ = ["BLOCKED", "load_trajectory", "writes_executed"]

E = ExecutionEventType

#: status of a write the replay runtime blocked (``WRITE_BLOCKED``)
BLOCKED = "BLOCKED"
#: events read into facts between two turns of the event loop (``load_trajectory``)
YIELD_EVERY_EVENTS = 1024

#: event types whose payload is read; every other event is skipped without a payload read
_READ = {
    E.MODEL_CALL,
    E.TOOL_CALL,
    E.SIDE_EFFECT,
    E.WRITE_BLOCKED,
    E.POLICY_DECISION,
    E.APPROVAL,
    E.RETRIEVAL,
    E.RUN_COMPLETED,
    E.RUN_FAILED,
    E.RUN_STARTED,
}


#: side-effect statuses of a write that was never dispatched to its provider
_NOT_DISPATCHED = {BLOCKED, "PLANNED"}


def writes_executed(trajectory: Trajectory) -> int:
    """The writes of a run that really reached a provider: its side effects the side-effect
    ledger moved past PLANNED (EXECUTING, then CONFIRMED, FAILED, UNKNOWN…), one per side
    effect. A replay's blocked writes (``WRITE_BLOCKED``, answered from the recording or as a
    dry run) are not among them: in a replay this is 0 unless some code path dispatched one."""
    return sum(1 for effect in trajectory.side_effects if effect.status not in _NOT_DISPATCHED)


def _model_decision(step_id: str, payload: dict[str, Any]) -> ModelDecision:
    response = payload.get("response") or {}
    calls = response.get("tool_calls") or ()
    content = response.get("content")
    return ModelDecision(
        step_id=step_id,
        tool_names=tuple(str(call.get("name")) for call in calls),
        argument_hashes=tuple(canonical_hash(call.get("arguments") or {}) for call in calls),
        content=content if isinstance(content, str) else None,
    )


def _tool_call_fact(step_id: str, payload: dict[str, Any]) -> ToolCallFact:
    """The fact of a recorded ``ToolFixture`` (the step it names, else the event's)."""
    return ToolCallFact(
        step_id=payload.get("step_id") or step_id,
        capability_id=payload["capability_id"],
        request_hash=payload["request_hash"],
        arguments=payload.get("sanitized_request"),
        outcome=payload["outcome"],
        side_effect_class=payload.get("side_effect_class", "WRITE"),
    )


def _policy_fact(step_id: str, payload: dict[str, Any]) -> PolicyFact:
    """The fact of a recorded policy decision (the step it names, else the event's)."""
    return PolicyFact(
        step_id=payload.get("step_id") or step_id,
        policy_id=payload["policy_id"],
        input_hash=payload["input_hash"],
        decision=payload["decision"],
    )


def _side_effect_facts(
    writes: dict[str, dict[str, Any]], arguments_by_request: dict[str, Any]
) -> tuple[SideEffectFact, ...]:
    """One fact per write, in order of first appearance; a side effect's arguments are those
    of the tool call filed under its ``provider_request_id``."""
    return tuple(
        SideEffectFact(
            step_id=write["step_id"],
            capability_id=write["capability_id"],
            action_hash=write["action_hash"],
            arguments=(
                write["arguments"]
                if "arguments" in write
                else arguments_by_request.get(write.get("provider_request_id") or "")
            ),
            status=write["status"],
        )
        for write in writes.values()
    )


def _candidates(started: Any) -> tuple[CandidateFact, ...]:
    """The candidates a replay's RUN_STARTED says it was given (none for any other run)."""
    listed = started.get("candidates") if isinstance(started, dict) else None
    return tuple(CandidateFact.model_validate(c) for c in (listed or []) if isinstance(c, dict))


def _prompt_drifts(step_id: str, payload: dict[str, Any]) -> list[PromptDriftFact]:
    """An EXACT replay's model call whose prompt today's code compiles otherwise (its
    ``prompt_drift``), as a fact; none for any other call."""
    drift = payload.get("prompt_drift")
    if not isinstance(drift, dict):
        return []
    return [PromptDriftFact.model_validate({**drift, "step_id": step_id})]


def _has_text(content: str | None) -> bool:
    return content is not None and content.strip() != ""


def _approval_fact(step_id: str, payload: dict[str, Any]) -> ApprovalFact:
    return ApprovalFact(
        step_id=step_id,
        action_hash=str(payload.get("action_hash")),
        decision=str(payload.get("decision", "APPROVED")),
        approver=str(payload.get("approver", "")),
    )


def _retrieval_fact(step_id: str, payload: dict[str, Any]) -> RetrievalFact:
    evidence = sorted(payload.get("evidence") or (), key=lambda e: e.get("rank", 0))
    return RetrievalFact(
        step_id=step_id,
        query_hash=str(payload.get("query_hash")),
        retriever_version=str(payload.get("retriever_version", "")),
        chunks=tuple(str(e.get("chunk_id")) for e in evidence),
    )


def _blocked_write(step_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A write the replay blocked, shaped as a side effect's payload with status BLOCKED."""
    return {
        "step_id": step_id,
        "capability_id": payload["capability_id"],
        "action_hash": payload["action_hash"],
        "arguments": payload.get("arguments"),
        "status": BLOCKED,
    }


async def load_trajectory(
    ledger: EventLedger, run_id: str, *, after_sequence: int = 0
) -> Trajectory:
    """The behaviour of run ``run_id`` as recorded in ``ledger`` (see the module docstring).
    ``after_sequence``: only what happened after that event (a fork compares the part of the
    source it re-executed, not the history it took over)."""
    steps: list[str] = []
    decisions: list[ModelDecision] = []
    tool_calls: list[ToolCallFact] = []
    policies: list[PolicyFact] = []
    approvals: list[ApprovalFact] = []
    retrievals: list[RetrievalFact] = []
    drifts: list[PromptDriftFact] = []
    # ordered by first appearance: a side effect's id, or the sequence of a WRITE_BLOCKED event
    writes: dict[str, dict[str, Any]] = {}
    arguments_by_request: dict[str, Any] = {}
    outcome: Any = None
    completed = False
    final_answer: str | None = None
    started: Any = None

    loaded = await ledger.events_with_payloads(run_id, types=frozenset({E.STEP_STARTED, *_READ}))
    async for event, data in in_turns(loaded, YIELD_EVERY_EVENTS):
        if event.type is E.RUN_STARTED:
            # the input is the run's whatever ``after_sequence`` says (expectations refer to it)
            started = json.loads(data or b"null")
            continue
        if event.sequence <= after_sequence:
            continue
        if event.type is E.STEP_STARTED:
            steps.append(event.step_id)
            continue
        payload = json.loads(data or b"null")
        if event.type is E.MODEL_CALL:
            decision = _model_decision(event.step_id, payload)
            decisions.append(decision)
            if _has_text(decision.content):
                final_answer = decision.content
            drifts.extend(_prompt_drifts(event.step_id, payload))
        elif event.type is E.TOOL_CALL:
            tool_calls.append(_tool_call_fact(event.step_id, payload))
            if payload.get("provider_request_id"):
                arguments_by_request.setdefault(
                    payload["provider_request_id"], payload.get("sanitized_request")
                )
        elif event.type is E.SIDE_EFFECT:
            writes[f"effect:{payload['side_effect_id']}"] = payload  # the last status wins
        elif event.type is E.WRITE_BLOCKED:
            writes[f"blocked:{event.sequence}"] = _blocked_write(event.step_id, payload)
        elif event.type is E.POLICY_DECISION:
            policies.append(_policy_fact(event.step_id, payload))
        elif event.type is E.APPROVAL:
            approvals.append(_approval_fact(event.step_id, payload))
        elif event.type is E.RETRIEVAL:
            retrievals.append(_retrieval_fact(event.step_id, payload))
        elif event.type is E.RUN_COMPLETED:
            outcome, completed = payload.get("outcome"), True
        elif event.type is E.RUN_FAILED:
            outcome = {"error": payload.get("error"), "message": payload.get("message")}
            completed = False

    return Trajectory(
        run_id=run_id,
        steps=tuple(steps),
        model_decisions=tuple(decisions),
        tool_calls=tuple(tool_calls),
        side_effects=_side_effect_facts(writes, arguments_by_request),
        policy_decisions=tuple(policies),
        approvals=tuple(approvals),
        retrievals=tuple(retrievals),
        prompt_drifts=tuple(drifts),
        candidates=_candidates(started),
        outcome=outcome,
        final_answer=final_answer,
        completed=completed,
        input=started.get("input") if isinstance(started, dict) else None,
    )

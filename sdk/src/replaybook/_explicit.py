"""The small explicit calls: retrieval, policy decisions, approvals, user turns, checkpoints,
each recorded into the current run (nothing happens outside a run)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from replaybook._jsonsafe import json_safe
from replaybook._run import current_run


def retrieval(
    *, query: Any, retriever_version: str, evidence: Sequence[Mapping[str, Any]] = ()
) -> None:
    """What a retriever returned: ``evidence`` items ``{document_id, document_version,
    chunk_id, chunk_hash, rank, score}``."""
    run = current_run()
    if run is not None:
        run.emit(
            {
                "type": "retrieval",
                "query": json_safe(query),
                "retriever_version": retriever_version,
                "evidence": [json_safe(dict(e)) for e in evidence],
            }
        )


def policy_decision(
    *,
    policy_id: str,
    policy_version: str,
    input: Any,
    decision: str,
    reasons: Sequence[str] = (),
) -> None:
    """A policy's decision (``ALLOW``, ``DENY`` or ``REQUIRE_APPROVAL``) on ``input``."""
    run = current_run()
    if run is not None:
        run.emit(
            {
                "type": "policy_decision",
                "policy_id": policy_id,
                "policy_version": policy_version,
                "input": json_safe(input),
                "decision": decision.upper(),
                "reasons": list(reasons),
            }
        )


def approval(
    *,
    approval_id: str,
    approver: str,
    capability: str,
    arguments: Mapping[str, Any] | None = None,
    decision: str = "APPROVED",
    expires_at: str | None = None,
) -> None:
    """A person's approval (or rejection) of one action, bound to its capability and arguments."""
    run = current_run()
    if run is not None:
        event: dict[str, Any] = {
            "type": "approval",
            "approval_id": approval_id,
            "approver": approver,
            "capability": capability,
            "arguments": json_safe(dict(arguments or {})),
            "decision": decision.upper(),
        }
        if expires_at is not None:
            event["expires_at"] = expires_at
        run.emit(event)


def user_message(content: str | None, done: bool = False) -> None:
    """A user turn of a chat run (``user_turns=True``)."""
    run = current_run()
    if run is not None:
        run.user_message(content, done)

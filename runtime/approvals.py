"""Approvals bound to one action hash (rule 4 of the seed's checklist: approval saves the
action hash). Executing with an approval that expired, was denied, or was granted for another
action is refused with a clear error."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from models import ApprovalDecision, ApprovalRecord, ExecutionEventType
from models.canonical import canonical_hash
from models.errors import (
    ApprovalDeniedError,
    ApprovalExpiredError,
    ApprovalMismatchError,
    ApprovalMissingError,
)
from runtime.recorder import RunRecorder


def action_hash(capability_id: str, arguments: Mapping[str, Any]) -> str:
    """The canonical hash of one concrete action: capability and exact arguments."""
    return canonical_hash({"capability": capability_id, "arguments": dict(arguments)})


def check_approval(
    approval: ApprovalRecord | None, expected_action_hash: str, now: datetime
) -> None:
    """Raise unless ``approval`` approves exactly this action and is valid at ``now``."""
    if approval is None:
        raise ApprovalMissingError(
            f"action {expected_action_hash} requires an approval and has none"
        )
    if approval.action_hash != expected_action_hash:
        raise ApprovalMismatchError(
            f"approval {approval.approval_id} was granted for action {approval.action_hash}, "
            f"not for {expected_action_hash}"
        )
    if approval.decision is not ApprovalDecision.APPROVED:
        raise ApprovalDeniedError(
            f"approval {approval.approval_id} was denied by {approval.approver}"
        )
    if approval.expires_at is not None and now >= approval.expires_at:
        raise ApprovalExpiredError(
            f"approval {approval.approval_id} expired at {approval.expires_at.isoformat()} "
            f"(now {now.isoformat()})"
        )


class Approver(Protocol):
    """Whoever answers approval requests (a person through a UI; simulated in the examples)."""

    async def review(
        self, capability_id: str, arguments: Mapping[str, Any]
    ) -> tuple[str, ApprovalDecision, timedelta]:
        """Return (approver, decision, validity)."""
        ...


class RecordingApprovalGateway:
    def __init__(self, approver: Approver, recorder: RunRecorder) -> None:
        self.approver = approver
        self.recorder = recorder

    async def request(self, capability_id: str, arguments: Mapping[str, Any]) -> ApprovalRecord:
        who, decision, validity = await self.approver.review(capability_id, arguments)
        now = self.recorder.logical_time()
        record = ApprovalRecord(
            approval_id=f"appr-{uuid.uuid4().hex[:16]}",
            approver=who,
            action_hash=action_hash(capability_id, self.recorder.hashing_view(dict(arguments))),
            decision=decision,
            approved_at=now,
            expires_at=now + validity,
            run_id=self.recorder.run_id,
            step_id=self.recorder.step_id,
        )
        await self.recorder.record(ExecutionEventType.APPROVAL, record=record)
        return record

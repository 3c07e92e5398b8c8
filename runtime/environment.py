"""What agent code sees: the clock, a seeded random source and the gateways. Nothing else."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from models import ApprovalRecord
from runtime.capabilities import CapabilityRegistry
from runtime.clock import AgentClock
from runtime.knowledge import RetrievedChunk
from runtime.model_gateway import RecordingModelGateway
from runtime.policy import RecordingPolicyEngine, WritePolicy
from runtime.recorder import RunRecorder
from runtime.tools import ToolResult


class ToolGateway(Protocol):
    """``env.tools``: ``RecordingToolGateway`` on a recorded run, ``ReplayToolGateway`` (answers
    from fixtures, never executes a WRITE) on a replay."""

    registry: CapabilityRegistry
    recorder: RunRecorder
    policy: WritePolicy

    async def call(
        self,
        capability_id: str,
        arguments: Mapping[str, Any],
        *,
        approval: ApprovalRecord | None = None,
        tool_call_id: str | None = None,
    ) -> ToolResult: ...


class KnowledgeGateway(Protocol):
    """``env.knowledge``: ``RecordingKnowledgeGateway`` or ``ReplayKnowledgeGateway``."""

    async def search(self, query: str, k: int = 3) -> list[RetrievedChunk]: ...


class ApprovalGateway(Protocol):
    """``env.approvals``: ``RecordingApprovalGateway`` or ``ReplayApprovalGateway``."""

    async def request(self, capability_id: str, arguments: Mapping[str, Any]) -> ApprovalRecord: ...


@dataclass
class AgentEnvironment:
    run_id: str
    clock: AgentClock
    #: seeded from the run's recorded seed: the same seed gives the same draws
    random: random.Random
    model: RecordingModelGateway
    tools: ToolGateway
    knowledge: KnowledgeGateway
    policy: RecordingPolicyEngine
    approvals: ApprovalGateway

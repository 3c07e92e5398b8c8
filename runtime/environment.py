"""What agent code sees: the clock, a seeded random source and the gateways. Nothing else."""

from __future__ import annotations

import random
from dataclasses import dataclass

from runtime.approvals import RecordingApprovalGateway
from runtime.clock import AgentClock
from runtime.knowledge import RecordingKnowledgeGateway
from runtime.model_gateway import RecordingModelGateway
from runtime.policy import RecordingPolicyEngine
from runtime.tools import RecordingToolGateway


@dataclass
class AgentEnvironment:
    run_id: str
    clock: AgentClock
    #: seeded from the run's recorded seed: the same seed gives the same draws
    random: random.Random
    model: RecordingModelGateway
    tools: RecordingToolGateway
    knowledge: RecordingKnowledgeGateway
    policy: RecordingPolicyEngine
    approvals: RecordingApprovalGateway

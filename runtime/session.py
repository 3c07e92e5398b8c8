"""Recording one agent run: build the environment, pin every version, execute, record."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models import PinnedVersions, RunRecord
from models.privacy import run_subjects
from runtime.approvals import Approver, RecordingApprovalGateway
from runtime.capabilities import CapabilityRegistry
from runtime.environment import AgentEnvironment
from runtime.executor import RunResult, execute_graph
from runtime.graph import GraphDefinition
from runtime.knowledge import RecordingKnowledgeGateway, Retriever
from runtime.manifests import capture_environment, capture_source_code
from runtime.model_gateway import RecordingModelGateway
from runtime.policy import PolicySet, RecordingPolicyEngine
from runtime.ports import ArtifactStore, EventLedger, ModelProvider, VaultedLedger
from runtime.privacy.redaction import recording_redaction, start_run
from runtime.prompts import PromptBundle
from runtime.recorder import RunRecorder
from runtime.tools import RecordingToolGateway, ToolProvider

#: payloads recorded as given (no sanitized view); agents opt in with ``redact-v1``
NO_REDACTION = "none"


@dataclass
class AgentSpec:
    """Everything that defines one agent build, each part versioned."""

    graph: GraphDefinition
    prompts: PromptBundle
    capabilities: CapabilityRegistry
    policies: PolicySet
    write_policy_id: str
    tool_providers: Mapping[str, ToolProvider]
    model: ModelProvider
    model_name: str
    retriever: Retriever
    approver: Approver
    redaction_policy_version: str = NO_REDACTION
    sanitize: Callable[[Any], Any] = field(default=lambda value: value)
    source_root: Path | None = None
    #: the most steps a run of this agent executes (``StepLimitExceeded`` past it); None: the
    #: process default, ``REPLAYBOOK_MAX_STEPS`` (1000 unless set)
    max_steps: int | None = None


async def record_run(
    spec: AgentSpec,
    ledger: EventLedger,
    artifacts: ArtifactStore,
    *,
    run_id: str,
    agent_input: Any,
    seed: int,
    labels: Mapping[str, str] | None = None,
) -> RunResult:
    run_labels = {"prompt_version": spec.prompts.version, **dict(labels or {})}
    subjects = run_subjects(run_labels)
    redaction = recording_redaction(spec.redaction_policy_version, spec.capabilities)
    recorder = RunRecorder(
        ledger,
        artifacts,
        run_id,
        redaction=redaction,
        subject_id=subjects[0].subject_id if subjects else None,
        # events are group-committed; durable where the write-ahead rule says (side-effect
        # intents, the run's end): see ``RunRecorder``
        write_behind=True,
    )
    policy = RecordingPolicyEngine(spec.policies, recorder, spec.sanitize)
    env = AgentEnvironment(
        run_id=run_id,
        clock=recorder.clock,
        random=random.Random(seed),
        model=RecordingModelGateway(spec.model, spec.prompts, recorder, model=spec.model_name),
        tools=RecordingToolGateway(
            spec.capabilities,
            spec.tool_providers,
            recorder,
            policy,
            spec.write_policy_id,
            spec.sanitize,
        ),
        knowledge=RecordingKnowledgeGateway(spec.retriever, recorder),
        policy=policy,
        approvals=RecordingApprovalGateway(spec.approver, recorder),
    )
    environment = capture_environment(spec.capabilities.catalog_hash())
    header = RunRecord(
        run_id=run_id,
        graph_id=spec.graph.graph_id,
        graph_version=spec.graph.version,
        created_at=recorder.logical_time(),
        pinned=PinnedVersions(
            model_profile=spec.model.profile,
            prompt_bundle_hash=spec.prompts.bundle_hash(),
            policy_version=spec.policies.version,
            capability_registry_version=spec.capabilities.version,
            knowledge_snapshot=spec.retriever.snapshot,
            redaction_policy_version=spec.redaction_policy_version,
            environment_hash=environment.record_hash(),
        ),
        environment=environment,
        source_code=capture_source_code(spec.source_root) if spec.source_root else None,
        labels=run_labels,
    )
    # a SQL ledger starts a run with its data key (when it will seal) and its subjects, in one
    # transaction: one commit (a sync of the disk) before the first step, not two; others
    # create it, then register its subjects
    if getattr(ledger, "starts_with_run_key", False):
        await start_run(ledger, header, [], redaction, subjects)
    else:
        await ledger.create_run(header)
        if isinstance(ledger, VaultedLedger):
            await ledger.vault.add_subjects(run_id, subjects)
    return await execute_graph(
        spec.graph, env, recorder, ledger, agent_input, seed=seed, max_steps=spec.max_steps
    )

"""The world a replayed step runs in: recorded or live model, recorded tools, knowledge,
policy and approvals, the source's clock and the replay's random state."""

from __future__ import annotations

import random
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from models import FixtureMissPolicy, PolicyDecisionRecord, ReplayMode, RunRecord
from models.budget import BudgetUsage
from models.replay_flow import ReplayCursorsView, ReplayPlan
from runtime.environment import AgentEnvironment
from runtime.executor import load_random_state
from runtime.model_gateway import RecordingModelGateway
from runtime.policy import RecordingPolicyEngine
from runtime.ports import ArtifactStore, EvidenceReader
from runtime.prompts import PromptBundle
from runtime.recorder import RunRecorder
from runtime.replay.catalog import AgentCatalog, replay_model
from runtime.replay.evidence_gateways import ReplayApprovalGateway, ReplayKnowledgeGateway
from runtime.replay.gateways import (
    LiveModelProvider,
    RecordedModelProvider,
    ReplayToolGateway,
    StepLedger,
)
from runtime.replay.prompt_drift import RecordedPromptModelGateway
from runtime.replay.source import ReplaySource
from runtime.team_tools import pinned_team_tools
from runtime.tools import ToolCallContext, ToolProvider


class EnvironmentHost(Protocol):
    """What a step's environment reads from the engine that runs it."""

    evidence: EvidenceReader
    artifacts: ArtifactStore

    async def live_read_time(
        self, graph_id: str, tool: str, arguments: dict[str, Any], context: ToolCallContext
    ) -> datetime: ...


def model_name(plan: ReplayPlan, catalog: AgentCatalog, run: RunRecord) -> str:
    return replay_model(
        catalog, plan.mode, plan.model_name, plan.substitute_model, run.pinned.model_profile
    )


def replay_bundle(plan: ReplayPlan, catalog: AgentCatalog, run: RunRecord) -> PromptBundle | None:
    """The prompt bundle the replay runs: the plan's version, else the one the source pinned."""
    return (
        catalog.bundle(plan.prompt_version)
        if plan.prompt_version
        else catalog.bundle_by_hash(run.pinned.prompt_bundle_hash)
    )


async def live_reads(
    host: EnvironmentHost, plan: ReplayPlan, catalog: AgentCatalog, graph_id: str
) -> Mapping[str, ToolProvider]:
    """The READ providers a fixture miss may call under ``SANDBOX_LIVE`` (none under the
    other policies): the catalog's, and the team's tools module's (``--tools-module``),
    imported and called in this process — a sandboxed step's: inside the sandbox — each
    call let through by ``live_read_time`` first."""
    if plan.miss_policy is not FixtureMissPolicy.SANDBOX_LIVE:
        return {}
    reads = await catalog.read_providers()
    if plan.tools_module is None:
        return reads

    async def gate(tool: str, arguments: dict[str, Any], context: ToolCallContext) -> Any:
        return await host.live_read_time(graph_id, tool, arguments, context)

    return {**reads, **pinned_team_tools(plan.tools_module).providers(gate)}


def _model_provider(
    plan: ReplayPlan,
    catalog: AgentCatalog,
    source: ReplaySource,
    positions: StepLedger,
    used: BudgetUsage,
) -> Any:
    """The recorded answers (RECORDED), else the live model within the replay's budget."""
    run = source.run
    if plan.mode is ReplayMode.RECORDED:
        return RecordedModelProvider(source, positions)
    return LiveModelProvider(
        catalog.model(model_name(plan, catalog, run)),
        positions,
        plan.budget,
        used,
        plan.sampling_seed,
        recorded_seed=plan.mode is ReplayMode.EXACT,
        max_loop_calls=plan.loop_call_cap(run.graph_id, run.labels),
    )


async def step_environment(
    host: EnvironmentHost,
    plan: ReplayPlan,
    source: ReplaySource,
    catalog: AgentCatalog,
    recorder: RunRecorder,
    positions: StepLedger,
    used: BudgetUsage,
    cursors: ReplayCursorsView,
    remembered: list[PolicyDecisionRecord] | None,
) -> AgentEnvironment:
    """The environment of one step. ``remembered``: the policy decisions the replay took in
    its earlier steps when this process ran them up to the step's head (else they are read:
    the step before ran in another process)."""
    run = source.run
    provider = _model_provider(plan, catalog, source, positions, used)
    bundle = replay_bundle(plan, catalog, run)
    assert bundle is not None  # checked in prepare
    policy = RecordingPolicyEngine(
        catalog.policy_set(plan.policy_version or run.pinned.policy_version or ""), recorder
    )
    policy.remember(
        remembered
        if remembered is not None
        else await host.evidence.records(PolicyDecisionRecord, plan.replay_id)
    )
    rng = (
        await load_random_state(host.artifacts, cursors.random_state_ref)
        if cursors.random_state_ref
        else random.Random(source.seed)
    )
    reads = await live_reads(host, plan, catalog, run.graph_id)
    return AgentEnvironment(
        run_id=plan.replay_id,
        clock=recorder.clock,
        random=rng,
        model=_model_gateway(plan, catalog, source, provider, bundle, recorder, positions),
        tools=ReplayToolGateway(
            catalog.capabilities,
            reads,
            recorder,
            policy,
            catalog.write_policy_id,
            source,
            positions,
            plan.miss_policy,
        ),
        knowledge=ReplayKnowledgeGateway(
            source,
            host.artifacts,
            recorder,
            positions,
            catalog.retriever(plan.retriever_version) if plan.retriever_version else None,
            plan.miss_policy,
        ),
        policy=policy,
        approvals=ReplayApprovalGateway(source, recorder, plan.deny_approvals),
    )


def _model_gateway(
    plan: ReplayPlan,
    catalog: AgentCatalog,
    source: ReplaySource,
    provider: Any,
    bundle: PromptBundle,
    recorder: RunRecorder,
    positions: StepLedger,
) -> RecordingModelGateway:
    """EXACT sends the recorded compiled prompts (and records where today's code compiles
    another); the other modes send today's compilation of their bundle."""
    if plan.mode is ReplayMode.RECORDED:
        return RecordingModelGateway(provider, bundle, recorder, model=catalog.default_model)
    model = model_name(plan, catalog, source.run)
    if plan.mode is ReplayMode.EXACT:
        return RecordedPromptModelGateway(
            provider, bundle, recorder, model=model, source=source, positions=positions
        )
    return RecordingModelGateway(provider, bundle, recorder, model=model)

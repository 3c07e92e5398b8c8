"""Preparing a replay: check the source and the request (each problem names what is missing),
then create the replay run (header and RUN_STARTED carrying the replay manifest)."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from models import (
    EnvironmentManifest,
    ExecutionEventType,
    PinnedVersions,
    PromptArtifact,
    ReplayConfidence,
    ReplayManifest,
    ReplayMode,
    RunRecord,
    SourceCodeManifest,
)
from models.canonical import normalize_json
from models.chain import ChainVerification
from models.completeness import EvidenceCompleteness
from models.errors import ReplaybookError
from models.redaction import NO_REDACTION
from models.replay_flow import PreparedReplay, ReplayCursorsView, ReplayPlan
from models.verdicts import manifest_drift
from runtime.graph import GraphDefinition
from runtime.manifests import capture_environment, capture_source_code
from runtime.ports import ArtifactStore, EventLedger, EvidenceReader, NewEvent, subject_vault
from runtime.privacy.redaction import destroyed_content_note
from runtime.replay.candidates import candidate_facts, candidate_problems
from runtime.replay.catalog import AgentCatalog
from runtime.replay.environment import model_name, replay_bundle
from runtime.replay.source import SourceEvidence
from runtime.team_tools import pin_problem

E = ExecutionEventType


class PreparationHost(Protocol):
    """What preparing a replay reads from the engine that prepares it."""

    ledger: EventLedger
    evidence: EvidenceReader
    artifacts: ArtifactStore

    async def source(self, run_id: str) -> SourceEvidence: ...

    async def verify_source(self, run_id: str) -> ChainVerification: ...

    async def source_completeness(self, run_id: str) -> EvidenceCompleteness: ...

    def catalog(self, graph_id: str) -> AgentCatalog: ...


class WorkerManifests:
    """This worker's environment and source manifests, captured once per catalog in this
    process (it runs the code it loaded), compared with the ones a run recorded."""

    def __init__(self) -> None:
        #: graph id -> this worker's environment and source manifests
        self._by_graph: dict[str, tuple[EnvironmentManifest, SourceCodeManifest | None]] = {}

    async def drift(self, run: RunRecord, catalog: AgentCatalog) -> list[str]:
        """The recorded environment and source manifests compared with this worker's,
        captured in a thread: git must not block the event loop other activities share."""
        current = self._by_graph.get(catalog.graph_id)
        if current is None:
            current = await asyncio.to_thread(_worker_manifests, catalog)
            self._by_graph[catalog.graph_id] = current
        environment, code = current
        drift = manifest_drift(run.environment, environment, "environment")
        return drift + manifest_drift(run.source_code, code, "source_code")


async def prepare_replay(
    host: PreparationHost, manifests: WorkerManifests, plan: ReplayPlan
) -> PreparedReplay:
    """Check the source and the request; each problem names what is missing. On success the
    replay run is created (header and RUN_STARTED with the replay manifest)."""
    verification = await host.verify_source(plan.source_run_id)
    if not verification.intact:
        return PreparedReplay(
            ok=False,
            problems=(
                f"source run {plan.source_run_id} does not verify: {verification.summary()}",
            ),
        )
    source = await host.source(plan.source_run_id)
    run = source.run
    completeness = await host.source_completeness(plan.source_run_id)
    try:
        catalog = host.catalog(run.graph_id)
        graph = catalog.graphs.get(run.graph_id, run.graph_version)
    except ReplaybookError as exc:
        return PreparedReplay(ok=False, problems=(str(exc),))
    problems = await _unusable_evidence(host, plan, source, catalog, graph)
    problems += _unknown_overrides(plan, catalog, run)
    problems += await candidate_problems(host.artifacts, plan, run.graph_id)
    if plan.tools_module is not None and (problem := pin_problem(plan.tools_module)):
        problems.append(problem)
    start_step, state_ref, cursors = _start_position(plan, source, graph, problems)
    if problems:
        return PreparedReplay(ok=False, problems=tuple(problems))
    # content destroyed by a deletion request: the replay runs on the sanitized view, and
    # says so (LIMITED, never "exact replay successful")
    destroyed = await destroyed_content_note(host.ledger, plan.source_run_id)
    drift = await manifests.drift(run, catalog)
    # a replay on another environment or source is not the recording's: LIMITED
    full = completeness.score == completeness.total and destroyed is None and not drift
    head, manifest = await _begin(host, plan, source, catalog, full)
    return PreparedReplay(
        ok=True,
        completeness_score=completeness.score,
        completeness_total=completeness.total,
        missing_evidence=completeness.missing + ((destroyed,) if destroyed else ()),
        confidence=ReplayConfidence.FULL if full else ReplayConfidence.LIMITED,
        graph=graph.key,
        start_step=start_step,
        state_ref=state_ref,
        cursors=cursors,
        head=head,
        source_steps=len(source.steps),
        manifest=manifest,
        environment_drift=tuple(drift),
    )


def _start_position(
    plan: ReplayPlan, source: SourceEvidence, graph: GraphDefinition, problems: list[str]
) -> tuple[str | None, str | None, ReplayCursorsView]:
    """Where the replay starts: the graph's entry, or the step after ``from_step`` with the
    state and cursors recorded there (a step with no checkpoint to regenerate from is added
    to ``problems``)."""
    if plan.from_step is None:
        return graph.entry, None, ReplayCursorsView()
    # the named step is the first one regenerated: history up to it, the step itself
    # and everything after it re-executed (the seed: "before step_17 use history,
    # from step_18 regenerate"); its state is the previous step's checkpoint
    marks = source.starts.get(plan.from_step)
    resumed = source.checkpoint_before(plan.from_step)
    first = source.steps[:1] == [plan.from_step]  # starts from the empty state
    if marks is None or (resumed is None and not first):
        problems.append(
            f"step {plan.from_step!r} has no checkpoint to regenerate from in run "
            f"{plan.source_run_id} (steps: {', '.join(dict.fromkeys(source.steps))})"
        )
        return graph.entry, None, ReplayCursorsView()
    cursors = ReplayCursorsView(
        model_calls=marks.model_calls,
        clock_reads=marks.clock_reads,
        random_state_ref=marks.random_state_ref,
    )
    return marks.next_step, resumed.state_ref if resumed is not None else None, cursors


async def _unusable_evidence(
    host: PreparationHost,
    plan: ReplayPlan,
    source: SourceEvidence,
    catalog: AgentCatalog,
    graph: GraphDefinition,
) -> list[str]:
    """What the replay needs from the source but cannot use: compiled prompts and retrieved
    chunks no longer retrievable, checkpoints whose state cannot be migrated to the deployed
    graph, a prompt bundle not deployed."""
    run = source.run
    problems: list[str] = []
    for prompt in await host.evidence.records(PromptArtifact, plan.source_run_id):
        if not await host.artifacts.exists(prompt.content_ref):
            problems.append(
                f"compiled prompt {prompt.artifact_id} ({prompt.content_ref}) is not retrievable"
            )
    for fixtures in source.retrievals.values():
        for item in fixtures[0].evidence:
            if not await host.artifacts.exists(item.chunk_hash):
                problems.append(
                    f"retrieved chunk {item.chunk_id} ({item.chunk_hash}) is not retrievable"
                )
    for checkpoint in source.checkpoints.values():
        try:
            graph.migration_path(checkpoint.state_schema_version)
        except ReplaybookError as exc:
            problems.append(f"checkpoint of step {checkpoint.step_id}: {exc}")
    if catalog.bundle_by_hash(run.pinned.prompt_bundle_hash) is None:
        problems.append(
            f"the source's prompt bundle {run.pinned.prompt_bundle_hash} is not deployed"
        )
    return problems


def _replay_pins(plan: ReplayPlan, source: SourceEvidence, catalog: AgentCatalog) -> PinnedVersions:
    """The versions the replay pins: the source's, with the plan's overrides."""
    run = source.run
    bundle = replay_bundle(plan, catalog, run)
    model_profile = (
        f"recorded:{run.pinned.model_profile}"
        if plan.mode is ReplayMode.RECORDED
        else catalog.model(model_name(plan, catalog, run)).profile
    )
    return run.pinned.model_copy(
        update={
            "model_profile": model_profile,
            # a tool-loop run pins its system prompt as its bundle: a candidate replaces it
            "prompt_bundle_hash": plan.candidate_system_prompt
            or (bundle.bundle_hash() if bundle else run.pinned.prompt_bundle_hash),
            "policy_version": plan.policy_version or run.pinned.policy_version,
            "knowledge_snapshot": plan.retriever_version or run.pinned.knowledge_snapshot,
        }
    )


async def _begin(
    host: PreparationHost,
    plan: ReplayPlan,
    source: SourceEvidence,
    catalog: AgentCatalog,
    full: bool,
) -> tuple[int, ReplayManifest]:
    """Create the replay run: header with the pinned (and overridden) versions, then
    RUN_STARTED carrying the replay manifest. Idempotent for a retried activity."""
    run = source.run
    pinned = _replay_pins(plan, source, catalog)
    manifest = _manifest(plan, source, pinned)
    await host.ledger.create_run(
        RunRecord(
            run_id=plan.replay_id,
            graph_id=run.graph_id,
            graph_version=run.graph_version,
            created_at=source.start_time,
            pinned=pinned,
            environment=run.environment,
            source_code=run.source_code,
            labels={
                "kind": "replay",
                "source_run_id": run.run_id,
                "mode": plan.mode.value,
                "simulation": str(plan.simulation).lower(),
                "confidence": (ReplayConfidence.FULL if full else ReplayConfidence.LIMITED).value,
            },
        )
    )
    vault = subject_vault(host.ledger)
    if vault is not None:  # the replay holds the source's people's data: their subjects too
        await vault.add_subjects(plan.replay_id, await vault.run_subjects(run.run_id))
    existing = await host.ledger.events(plan.replay_id)
    if existing:  # prepared before (a retried activity): the header is already there
        return existing[-1].sequence, manifest
    payload: dict[str, Any] = {
        "input": normalize_json(plan.agent_input_for(source.agent_input)),
        "seed": source.seed,
        "manifest": manifest.model_dump(mode="json"),
        "from_step": plan.from_step,
    }
    candidates = await candidate_facts(host.artifacts, plan, source.agent_input)
    if candidates:  # what was swapped in, and how it differs (the trajectory's facts)
        payload["candidates"] = candidates
    event = NewEvent("run", E.RUN_STARTED, source.start_time, payload=payload)
    policy = pinned.redaction_policy_version
    if policy not in (None, NO_REDACTION):
        # made of the source's sanitized evidence: its raw form is itself, and its raw-payload
        # row says so (without one, the pseudonyms it carries would read as a deleted raw row)
        event = NewEvent(
            "run",
            E.RUN_STARTED,
            source.start_time,
            payload=payload,
            raw=event.canonical_payload(),
            redaction_policy_version=policy,
        )
    started = await host.ledger.append(plan.replay_id, event, expected_sequence=1)
    return started.sequence, manifest


def _manifest(plan: ReplayPlan, source: SourceEvidence, pinned: PinnedVersions) -> ReplayManifest:
    """What the replay is bound to: the source, the versions it pinned (with the plan's
    overrides) and, for a live replay, the recorded model profile and any substitute."""
    run = source.run
    model_profile = pinned.model_profile
    return ReplayManifest(
        replay_id=plan.replay_id,
        source_run_id=run.run_id,
        source_run_version=str(source.event_count),
        model_profile=model_profile,
        recorded_model_profile=run.pinned.model_profile,
        substituted_model=plan.substitute_model if plan.mode is not ReplayMode.RECORDED else None,
        candidate_system_prompt=plan.candidate_system_prompt,
        candidate_tools=plan.candidate_tools,
        tools_module=plan.tools_module,
        prompt_bundle_hash=pinned.prompt_bundle_hash,
        graph_version=run.graph_version,
        policy_version=pinned.policy_version,
        capability_registry_version=run.pinned.capability_registry_version,
        knowledge_snapshot=pinned.knowledge_snapshot,
        evaluator_version=run.pinned.evaluator_version,
        logical_time=source.start_time,
        environment_hash=run.pinned.environment_hash,
        mode=plan.mode,
        simulation=plan.simulation,
    )


def _worker_manifests(
    catalog: AgentCatalog,
) -> tuple[EnvironmentManifest, SourceCodeManifest | None]:
    """This worker's environment (with the catalog's tool bundle, as a recording has it) and
    the source manifest of the catalog's checkout."""
    environment = capture_environment(catalog.capabilities.catalog_hash())
    code = capture_source_code(catalog.source_root) if catalog.source_root else None
    return environment, code


def _unknown_overrides(plan: ReplayPlan, catalog: AgentCatalog, run: RunRecord) -> list[str]:
    """The first override of the plan (prompt, model, policy, retriever) this worker's catalog
    does not have, as a problem."""
    try:
        if plan.prompt_version:
            catalog.bundle(plan.prompt_version)
        if plan.mode is not ReplayMode.RECORDED:
            # the model the replay would call must be one this worker has (a run recorded
            # elsewhere names a model rarely deployed here): said here, as a problem of
            # PREPARING (an INCONCLUSIVE verdict), never as a failed activity
            catalog.model(model_name(plan, catalog, run))
        if plan.policy_version:
            catalog.policy_set(plan.policy_version)
        if plan.retriever_version:
            catalog.retriever(plan.retriever_version)
    except ReplaybookError as exc:
        return [str(exc)]
    return []

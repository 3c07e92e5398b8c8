"""The replay engine: prepare a replay, then execute it one step at a time.

Each step is recorded whole or not at all (the recorder is deferred and flushes with the
expected sequence), so a step retried after a crash never duplicates events: if the step was
already recorded, its recorded result is returned instead of running it again.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from models import (
    EnvironmentManifest,
    ExecutionEventType,
    FixtureMissPolicy,
    PinnedVersions,
    PolicyDecisionRecord,
    PromptArtifact,
    ReplayConfidence,
    ReplayManifest,
    ReplayMode,
    RunRecord,
    RunStatus,
    SourceCodeManifest,
)
from models.budget import BudgetUsage
from models.canonical import normalize_json
from models.errors import (
    ActionRefusedError,
    BudgetExhaustedError,
    FixtureMissError,
    ReplaybookError,
    SequenceConflictError,
)
from models.replay_flow import PreparedReplay, ReplayCursorsView, ReplayPlan, StepInput, StepOutput
from models.verdicts import manifest_drift
from runtime.completeness import evidence_completeness
from runtime.environment import AgentEnvironment
from runtime.executor import load_random_state, migrate_recorded_state, store_random_state
from runtime.graph import GraphDefinition
from runtime.manifests import capture_environment, capture_source_code
from runtime.model_gateway import RecordingModelGateway
from runtime.policy import RecordingPolicyEngine
from runtime.ports import ArtifactStore, EventLedger, EvidenceReader, NewEvent
from runtime.privacy.redaction import destroyed_content_note, replay_redaction
from runtime.prompts import PromptBundle
from runtime.recorder import RunRecorder
from runtime.replay.candidates import candidate_facts, candidate_problems
from runtime.replay.catalog import AgentCatalog, replay_model
from runtime.replay.evidence_gateways import ReplayApprovalGateway, ReplayKnowledgeGateway
from runtime.replay.gateways import (
    FixedAgentClock,
    LiveModelProvider,
    RecordedModelProvider,
    ReplayToolGateway,
    StepLedger,
)
from runtime.replay.prompt_drift import RecordedPromptModelGateway
from runtime.replay.source import ReplaySource, SourceEvidence, load_source_evidence
from runtime.team_tools import pin_problem, pinned_team_tools
from runtime.tools import ToolCallContext, ToolProvider

E = ExecutionEventType
#: errors that end a replay with a (partial) result instead of failing it
STOPPING_ERRORS = (BudgetExhaustedError, FixtureMissError, ActionRefusedError)


#: the evidence bytes the engine keeps cached across replays (the newest source always stays)
SOURCE_CACHE_BYTES = 64 * 1024 * 1024


class ReplayEngine:
    def __init__(
        self,
        ledger: EventLedger,
        evidence: EvidenceReader,
        artifacts: ArtifactStore,
        catalogs: Mapping[str, AgentCatalog],
        cache_size: int = 64,
        isolation: str | None = None,
        cache_bytes: int = SOURCE_CACHE_BYTES,
    ) -> None:
        self.ledger = ledger
        self.evidence = evidence
        self.artifacts = artifacts
        self.catalogs = catalogs
        self._cache: OrderedDict[str, SourceEvidence] = OrderedDict()
        #: replay id -> (head, consumed fixtures, consumed retrievals) after its last step here
        self._consumption: dict[str, tuple[int, dict[str, int], dict[str, int]]] = {}
        #: replay id -> (head, the policy decisions the replay took) after its last step here:
        #: the next step at that head starts from them instead of reading them all again
        self._decisions: dict[str, tuple[int, list[PolicyDecisionRecord]]] = {}
        self._cache_size = cache_size
        #: the cache is bounded by the evidence bytes it holds, not only by run count: one
        #: long run can weigh more than a hundred short ones (the newest source always stays)
        self._cache_bytes = cache_bytes
        #: graph id -> this worker's environment and source manifests (captured once)
        self._manifests: dict[str, tuple[EnvironmentManifest, SourceCodeManifest | None]] = {}
        #: how the steps this engine runs are isolated (rule 16), recorded in each STEP_STARTED
        self.isolation = isolation

    async def source(self, run_id: str) -> SourceEvidence:
        """The source evidence, cached: a replay's steps all read the same recording."""
        if run_id in self._cache:
            self._cache.move_to_end(run_id)
            return self._cache[run_id]
        source = await load_source_evidence(self.ledger, self.evidence, self.artifacts, run_id)
        self._cache[run_id] = source
        held = sum(cached.loaded_bytes for cached in self._cache.values())
        while len(self._cache) > 1 and (
            len(self._cache) > self._cache_size or held > self._cache_bytes
        ):
            _, dropped = self._cache.popitem(last=False)
            held -= dropped.loaded_bytes
        return source

    async def step_source(self, run_id: str) -> ReplaySource:
        """The source as a step reads it (one recorded item at a time): the cached evidence
        here; a sandboxed process's engine asks the worker instead of loading it again."""
        return await self.source(run_id)

    async def _environment_drift(self, run: RunRecord, catalog: AgentCatalog) -> list[str]:
        """The recorded environment and source manifests compared with this worker's. The
        worker's are captured once per catalog in this process (it runs the code it loaded),
        in a thread: git must not block the event loop other activities share."""
        current = self._manifests.get(catalog.graph_id)
        if current is None:
            current = await asyncio.to_thread(_worker_manifests, catalog)
            self._manifests[catalog.graph_id] = current
        environment, code = current
        drift = manifest_drift(run.environment, environment, "environment")
        return drift + manifest_drift(run.source_code, code, "source_code")

    def catalog(self, graph_id: str) -> AgentCatalog:
        try:
            return self.catalogs[graph_id]
        except KeyError:
            raise ReplaybookError(
                f"no agent catalog for graph {graph_id!r}: its code is not deployed on this worker"
            ) from None

    # PREPARING ------------------------------------------------------------------------------

    async def prepare(self, plan: ReplayPlan) -> PreparedReplay:
        """Check the source and the request; each problem names what is missing. On success the
        replay run is created (header and RUN_STARTED with the replay manifest)."""
        problems: list[str] = []
        verification = await self.ledger.verify(plan.source_run_id)
        if not verification.intact:
            return PreparedReplay(
                ok=False,
                problems=(
                    f"source run {plan.source_run_id} does not verify: {verification.summary()}",
                ),
            )
        source = await self.source(plan.source_run_id)
        run = source.run
        completeness = await evidence_completeness(
            self.ledger, self.evidence, self.artifacts, plan.source_run_id
        )
        try:
            catalog = self.catalog(run.graph_id)
            graph = catalog.graphs.get(run.graph_id, run.graph_version)
        except ReplaybookError as exc:
            return PreparedReplay(ok=False, problems=(str(exc),))
        problems += await self._unusable_evidence(plan, source, catalog, graph)
        problems += _unknown_overrides(plan, catalog, run)
        problems += await candidate_problems(self.artifacts, plan, run.graph_id)
        if plan.tools_module is not None and (problem := pin_problem(plan.tools_module)):
            problems.append(problem)

        start_step: str | None = graph.entry
        state_ref: str | None = None
        cursors = ReplayCursorsView()
        if plan.from_step is not None:
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
            else:
                start_step = marks.next_step
                state_ref = resumed.state_ref if resumed is not None else None
                cursors = ReplayCursorsView(
                    model_calls=marks.model_calls,
                    clock_reads=marks.clock_reads,
                    random_state_ref=marks.random_state_ref,
                )
        if problems:
            return PreparedReplay(ok=False, problems=tuple(problems))
        # content destroyed by a deletion request: the replay runs on the sanitized view, and
        # says so (LIMITED, never "exact replay successful")
        destroyed = await destroyed_content_note(self.ledger, plan.source_run_id)
        drift = await self._environment_drift(run, catalog)
        # a replay on another environment or source is not the recording's: LIMITED
        full = completeness.score == completeness.total and destroyed is None and not drift
        head, manifest = await self._begin(plan, source, catalog, full)
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

    async def _unusable_evidence(
        self,
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
        for prompt in await self.evidence.records(PromptArtifact, plan.source_run_id):
            if not await self.artifacts.exists(prompt.content_ref):
                problems.append(
                    f"compiled prompt {prompt.artifact_id} ({prompt.content_ref}) is not retrievable"
                )
        for fixtures in source.retrievals.values():
            for item in fixtures[0].evidence:
                if not await self.artifacts.exists(item.chunk_hash):
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

    async def _begin(
        self, plan: ReplayPlan, source: SourceEvidence, catalog: AgentCatalog, full: bool
    ) -> tuple[int, ReplayManifest]:
        """Create the replay run: header with the pinned (and overridden) versions, then
        RUN_STARTED carrying the replay manifest. Idempotent for a retried activity."""
        run = source.run
        bundle = (
            catalog.bundle(plan.prompt_version)
            if plan.prompt_version
            else catalog.bundle_by_hash(run.pinned.prompt_bundle_hash)
        )
        model_profile = (
            f"recorded:{run.pinned.model_profile}"
            if plan.mode is ReplayMode.RECORDED
            else catalog.model(_model_name(plan, catalog, run)).profile
        )
        pinned = run.pinned.model_copy(
            update={
                "model_profile": model_profile,
                # a tool-loop run pins its system prompt as its bundle: a candidate replaces it
                "prompt_bundle_hash": plan.candidate_system_prompt
                or (bundle.bundle_hash() if bundle else run.pinned.prompt_bundle_hash),
                "policy_version": plan.policy_version or run.pinned.policy_version,
                "knowledge_snapshot": plan.retriever_version or run.pinned.knowledge_snapshot,
            }
        )
        manifest = _manifest(plan, source, pinned)
        await self.ledger.create_run(
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
                    "confidence": (
                        ReplayConfidence.FULL if full else ReplayConfidence.LIMITED
                    ).value,
                },
            )
        )
        vault = getattr(self.ledger, "vault", None)
        if vault is not None:  # the replay holds the source's people's data: their subjects too
            await vault.add_subjects(plan.replay_id, await vault.run_subjects(run.run_id))
        existing = await self.ledger.events(plan.replay_id)
        if existing:  # prepared before (a retried activity): the header is already there
            return existing[-1].sequence, manifest
        payload = {
            "input": normalize_json(plan.agent_input_for(source.agent_input)),
            "seed": source.seed,
            "manifest": manifest.model_dump(mode="json"),
            "from_step": plan.from_step,
        }
        candidates = await candidate_facts(self.artifacts, plan, source.agent_input)
        if candidates:  # what was swapped in, and how it differs (the trajectory's facts)
            payload["candidates"] = candidates
        started = await self.ledger.append(
            plan.replay_id,
            NewEvent("run", E.RUN_STARTED, source.start_time, payload=payload),
            expected_sequence=1,
        )
        return started.sequence, manifest

    # RUNNING --------------------------------------------------------------------------------

    async def _live_reads(
        self, plan: ReplayPlan, catalog: AgentCatalog, graph_id: str
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
            return await self.live_read_time(graph_id, tool, arguments, context)

        return {**reads, **pinned_team_tools(plan.tools_module).providers(gate)}

    async def live_read_time(
        self, graph_id: str, tool: str, arguments: dict[str, Any], context: ToolCallContext
    ) -> datetime:
        """The logical time a team's READ tool is called with: the replay's own (this process
        records the replay). A sandboxed step's engine asks the worker's guard instead."""
        return context.logical_time

    async def run_step(self, step: StepInput) -> StepOutput:
        """Execute one step of the replay; idempotent across retries (see module docstring)."""
        plan = step.plan
        # this engine recorded the replay up to ``head`` itself: an earlier attempt of this
        # step elsewhere is still possible, and the conditional append below finds it out
        # (then ``_already_recorded`` answers); else look before running anything
        ours = self._consumption.get(plan.replay_id, (None,))[0] == step.head
        recorded = None if ours else await self._already_recorded(step)
        if recorded is not None:
            await self._close_if_finished(step.plan, recorded)
            return recorded
        source = await self.step_source(plan.source_run_id)
        catalog = self.catalog(source.run.graph_id)
        graph = catalog.graphs.get(source.run.graph_id, source.run.graph_version)
        fixtures, retrievals = await self._consumed(plan, source, step.head)
        positions = StepLedger(
            model_calls=step.cursors.model_calls,
            clock_reads=step.cursors.clock_reads,
            fixtures=fixtures,
            retrievals=retrievals,
        )
        recorder = self._step_recorder(step, source, catalog, positions)
        env = await self._environment(
            plan, source, catalog, recorder, positions, step.usage, step.cursors, step.head
        )
        state = await self._step_state(step, source, graph, recorder)

        started: dict[str, Any] = {"step": step.step_id}
        if self.isolation is not None:
            started["isolation"] = self.isolation
        await recorder.record(E.STEP_STARTED, payload=started)
        stopped, next_step, outcome, state_ref = await _execute_step(
            step, graph, env, state, source, recorder
        )
        finished = stopped is not None or next_step is None
        output = StepOutput(
            step_id=step.step_id,
            next_step=next_step,
            state_ref=state_ref,
            cursors=ReplayCursorsView(
                model_calls=positions.model_calls,
                clock_reads=positions.clock_reads,
                random_state_ref=await store_random_state(recorder, env.random),
            ),
            head=step.head,
            writes_blocked=positions.writes_blocked,
            fixture_misses=positions.fixture_misses,
            sandbox_live_calls=positions.sandbox_live_calls,
            usage=positions.usage(),
            stopped=stopped,
            finished=finished,
        )
        await _record_step_end(recorder, output, outcome)
        try:
            await recorder.flush(expected_sequence=step.head + 1)
        except SequenceConflictError:
            again = await self._already_recorded(step)
            if again is None:
                raise
            await self._close_if_finished(plan, again)
            return again
        self._consumption[plan.replay_id] = (
            recorder.last_sequence,
            positions.fixtures,
            positions.retrievals,
        )
        self._decisions[plan.replay_id] = (recorder.last_sequence, env.policy.decisions())
        if finished:
            self._consumption.pop(plan.replay_id, None)
            self._decisions.pop(plan.replay_id, None)
            status = RunStatus.FAILED if stopped else RunStatus.COMPLETED
            # the header shows the outcome as chained in RUN_COMPLETED (sanitized, rule 17)
            await self.ledger.finish_run(
                plan.replay_id,
                status,
                recorder.hashing_view(outcome) if not stopped else {"stopped": stopped},
            )
        return output.model_copy(update={"head": recorder.last_sequence})

    def _step_recorder(
        self,
        step: StepInput,
        source: ReplaySource,
        catalog: AgentCatalog,
        positions: StepLedger,
    ) -> RunRecorder:
        """The deferred recorder of one step, after the replay's ``head``, reading the source's
        clock."""
        # the source's redaction policy: lookup hashes match the source's, and anything a live
        # model adds is sanitized like the source was
        recorder = RunRecorder(
            self.ledger,
            self.artifacts,
            step.plan.replay_id,
            deferred=True,
            redaction=replay_redaction(source.run, catalog.capabilities),
        )
        recorder.clock = FixedAgentClock(source, positions, recorder)
        recorder.last_sequence = step.head
        recorder.step_id = step.step_id
        return recorder

    async def _step_state(
        self, step: StepInput, source: ReplaySource, graph: GraphDefinition, recorder: RunRecorder
    ) -> dict[str, Any]:
        """The state the step starts from: empty, the previous step's, or (the first step of a
        fork) the source's checkpoint migrated to the deployed graph's schema."""
        plan = step.plan
        state: dict[str, Any] = (
            json.loads(await self.artifacts.get(step.state_ref)) if step.state_ref else {}
        )
        if step.state_ref and step.step_index == 0 and plan.from_step:
            fork = source.fork_point(plan.from_step)
            if fork is None or fork.state_schema_version is None:  # prepare refuses such a fork
                raise ReplaybookError(f"step {plan.from_step!r} has no checkpoint to fork from")
            state = await migrate_recorded_state(graph, recorder, state, fork.state_schema_version)
        return state

    async def run_steps(self, step: StepInput) -> StepOutput:
        """Run up to ``plan.activity_batch()`` steps (an automatic batch also ends once its
        ``activity_batch_seconds()`` have passed), each recorded atomically; their counters
        are summed and the last step's position is returned. A batch also ends after a step
        that called a live model: each such call may take up to the model's timeout (minutes
        for a small local model on busy cores), and a batch of several would outlast the step
        activity's deadline and the sandbox's wall-clock limit (15 minutes each)."""
        total: StepOutput | None = None
        current = step
        seconds = step.plan.activity_batch_seconds()
        ends = None if seconds is None else time.monotonic() + seconds
        for _ in range(step.plan.activity_batch()):
            out = await self.run_step(current)
            total = (
                out
                if total is None
                else out.model_copy(
                    update={
                        "steps": total.steps + 1,
                        "writes_blocked": total.writes_blocked + out.writes_blocked,
                        "fixture_misses": total.fixture_misses + out.fixture_misses,
                        "sandbox_live_calls": total.sandbox_live_calls + out.sandbox_live_calls,
                        "usage": total.usage.plus(out.usage),
                    }
                )
            )
            if out.finished or out.next_step is None or out.usage.model_calls:
                break
            if ends is not None and time.monotonic() >= ends:
                break
            current = current.model_copy(
                update={
                    "step_id": out.next_step,
                    "state_ref": out.state_ref,
                    "cursors": out.cursors,
                    "head": out.head,
                    "usage": current.usage.plus(out.usage),
                    "step_index": current.step_index + 1,
                }
            )
        assert total is not None
        return total

    async def _consumed(
        self, plan: ReplayPlan, source: ReplaySource, head: int
    ) -> tuple[dict[str, int], dict[str, int]]:
        """How often each recorded request was already answered in this replay: the fork's
        position in the source plus the replay's own TOOL_CALL and RETRIEVAL events (kept per
        replay in this process; recomputed from the ledger when another worker ran the step)."""
        cached = self._consumption.get(plan.replay_id)
        if cached is not None and cached[0] == head:
            return dict(cached[1]), dict(cached[2])
        fixtures: dict[str, int] = {}
        retrievals: dict[str, int] = {}
        fork = source.fork_point(plan.from_step) if plan.from_step else None
        if fork is not None:
            fixtures, retrievals = dict(fork.fixtures), dict(fork.retrievals)
        loaded = await self.ledger.events_with_payloads(
            plan.replay_id, types=frozenset({E.TOOL_CALL, E.RETRIEVAL})
        )
        for event, data in loaded:
            if event.sequence > head:
                break
            payload = json.loads(data or b"{}")
            if event.type is E.TOOL_CALL:
                fixtures[payload["request_hash"]] = fixtures.get(payload["request_hash"], 0) + 1
            else:
                retrievals[payload["query_hash"]] = retrievals.get(payload["query_hash"], 0) + 1
        return fixtures, retrievals

    async def _close_if_finished(self, plan: ReplayPlan, output: StepOutput) -> None:
        """An earlier attempt recorded the replay's last step but died before closing the
        run's header: close it now (COMPLETED with the recorded outcome, or FAILED), so a
        worker killed at that moment does not leave the replay's run RUNNING."""
        if not output.finished:
            return
        run = await self.ledger.get_run(plan.replay_id)
        if run.status is not RunStatus.RUNNING:
            return
        ends = await self.ledger.events_with_payloads(
            plan.replay_id, types=frozenset({E.RUN_COMPLETED, E.RUN_FAILED})
        )
        payload = json.loads(ends[-1][1] or b"{}") if ends else {}
        if output.stopped:
            await self.ledger.finish_run(
                plan.replay_id, RunStatus.FAILED, {"stopped": output.stopped}
            )
        else:
            await self.ledger.finish_run(
                plan.replay_id, RunStatus.COMPLETED, payload.get("outcome")
            )

    async def _already_recorded(self, step: StepInput) -> StepOutput | None:
        """This step's output if an earlier attempt recorded it (the chain moved past ``head``):
        the first STEP_COMPLETED after ``head``, ending at it (or at the run's end right after)."""
        events = await self.ledger.events(step.plan.replay_id, from_sequence=step.head + 1)
        for index, event in enumerate(events):
            if event.type is E.STEP_COMPLETED:
                payload = json.loads(await self.ledger.payload(event))
                output = StepOutput.model_validate(payload["replay_step"])
                end = event.sequence
                if index + 1 < len(events) and events[index + 1].type in (
                    E.RUN_COMPLETED,
                    E.RUN_FAILED,
                ):
                    end = events[index + 1].sequence
                return output.model_copy(update={"head": end})
        return None

    async def _environment(
        self,
        plan: ReplayPlan,
        source: ReplaySource,
        catalog: AgentCatalog,
        recorder: RunRecorder,
        positions: StepLedger,
        used: BudgetUsage,
        cursors: ReplayCursorsView,
        head: int,
    ) -> AgentEnvironment:
        run = source.run
        if plan.mode is ReplayMode.RECORDED:
            provider: Any = RecordedModelProvider(source, positions)
        else:
            live = catalog.model(_model_name(plan, catalog, run))
            provider = LiveModelProvider(
                live,
                positions,
                plan.budget,
                used,
                plan.sampling_seed,
                recorded_seed=plan.mode is ReplayMode.EXACT,
                max_loop_calls=plan.loop_call_cap(run.graph_id, run.labels),
            )
        bundle = (
            catalog.bundle(plan.prompt_version)
            if plan.prompt_version
            else catalog.bundle_by_hash(run.pinned.prompt_bundle_hash)
        )
        assert bundle is not None  # checked in prepare
        policy = RecordingPolicyEngine(
            catalog.policy_set(plan.policy_version or run.pinned.policy_version or ""), recorder
        )
        # decisions the replay took in its earlier steps: kept here when this engine ran them
        # up to ``head``, else read (the step before ran in another process)
        cached = self._decisions.get(plan.replay_id)
        policy.remember(
            cached[1]
            if cached is not None and cached[0] == head
            else await self.evidence.records(PolicyDecisionRecord, plan.replay_id)
        )
        rng = (
            await load_random_state(self.artifacts, cursors.random_state_ref)
            if cursors.random_state_ref
            else random.Random(source.seed)
        )
        live_reads = await self._live_reads(plan, catalog, run.graph_id)
        return AgentEnvironment(
            run_id=plan.replay_id,
            clock=recorder.clock,
            random=rng,
            model=_model_gateway(plan, catalog, source, provider, bundle, recorder, positions),
            tools=ReplayToolGateway(
                catalog.capabilities,
                live_reads,
                recorder,
                policy,
                catalog.write_policy_id,
                source,
                positions,
                plan.miss_policy,
            ),
            knowledge=ReplayKnowledgeGateway(
                source,
                self.artifacts,
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
    model = _model_name(plan, catalog, source.run)
    if plan.mode is ReplayMode.EXACT:
        return RecordedPromptModelGateway(
            provider, bundle, recorder, model=model, source=source, positions=positions
        )
    return RecordingModelGateway(provider, bundle, recorder, model=model)


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


def _model_name(plan: ReplayPlan, catalog: AgentCatalog, run: RunRecord) -> str:
    return replay_model(
        catalog, plan.mode, plan.model_name, plan.substitute_model, run.pinned.model_profile
    )


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
            catalog.model(_model_name(plan, catalog, run))
        if plan.policy_version:
            catalog.policy_set(plan.policy_version)
        if plan.retriever_version:
            catalog.retriever(plan.retriever_version)
    except ReplaybookError as exc:
        return [str(exc)]
    return []


async def _execute_step(
    step: StepInput,
    graph: GraphDefinition,
    env: AgentEnvironment,
    state: dict[str, Any],
    source: ReplaySource,
    recorder: RunRecorder,
) -> tuple[str | None, str | None, Any, str | None]:
    """Run the step's code: (why it stopped the replay, the next step, its output, the state
    checkpointed after it). A stopping error (budget, fixture miss, refused action) stops the
    replay; the state is then left as it was."""
    stopped: str | None = None
    next_step: str | None = None
    outcome: Any = None
    state_ref = step.state_ref
    try:
        # the candidates' system prompt and tool catalogue, when swapped in
        result = await graph.steps[step.step_id](
            env, state, step.plan.agent_input_for(source.agent_input)
        )
    except FixtureMissError as exc:
        # the verdict names where and for what (issue 16): "fixture miss at step S for …"
        capability = exc.capability_id or "unknown"
        stopped = (
            f"FixtureMissError: fixture miss at step {step.step_id} "
            f"for capability {capability}: {exc}"
        )
    except STOPPING_ERRORS as exc:
        stopped = f"{type(exc).__name__}: {exc}"
    else:
        checkpoint = await recorder.checkpoint(
            step.step_id, result.state, graph.state_schema_version, None
        )
        state_ref, next_step, outcome = (
            checkpoint.state_ref,
            result.next,
            normalize_json(result.output),
        )
    return stopped, next_step, outcome, state_ref


async def _record_step_end(recorder: RunRecorder, output: StepOutput, outcome: Any) -> None:
    """STEP_COMPLETED carrying the step's output (so a retry finds it), then RUN_FAILED
    (partial) when the replay stopped here or RUN_COMPLETED when it finished."""
    marker = {"replay_step": output.model_dump(mode="json")}
    await recorder.record(
        E.STEP_COMPLETED, payload={"next": output.next_step, "output": outcome, **marker}
    )
    if output.stopped is not None:
        recorder.step_id = "run"
        error = output.stopped.split(":", 1)[0]
        await recorder.record(
            E.RUN_FAILED,
            payload={"error": error, "message": output.stopped, "partial": True, **marker},
        )
    elif output.finished:
        recorder.step_id = "run"
        await recorder.record(E.RUN_COMPLETED, payload={"outcome": outcome, **marker})

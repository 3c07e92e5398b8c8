"""The replay engine: prepare a replay, then execute it one step at a time.

The engine holds what a worker keeps between the activities of a replay (the decoded source
evidence, this worker's manifests, what it remembers of each replay after its last step) and
hands each phase to its module: ``preparation`` (check the request, create the replay run),
``environment`` (the world a replayed step runs in) and ``stepping`` (run and record a step
exactly once). A sandboxed process's engine overrides ``step_source`` and ``live_read_time``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from models.chain import ChainVerification
from models.completeness import EvidenceCompleteness
from models.errors import ReplaybookError
from models.replay_flow import PreparedReplay, ReplayPlan, StepInput, StepOutput
from runtime.clock import system_time
from runtime.completeness import evidence_completeness
from runtime.fresh_calls import FreshCalls
from runtime.ports import ArtifactStore, EventLedger, EvidenceReader
from runtime.replay.catalog import AgentCatalog
from runtime.replay.preparation import WorkerManifests, prepare_replay
from runtime.replay.source import ReplaySource, SourceEvidence, load_source_evidence
from runtime.replay.stepping import StepMemory, batch_total, next_in_batch, run_step
from runtime.tools import ToolCallContext

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
        self._cache_size = cache_size
        #: the cache is bounded by the evidence bytes it holds, not only by run count: one
        #: long run can weigh more than a hundred short ones (the newest source always stays)
        self._cache_bytes = cache_bytes
        #: this worker's environment and source manifests (captured once per catalog)
        self._manifests = WorkerManifests()
        #: the checks a replay's preparation makes of its source, and the source's loading,
        #: shared by the sibling replays that ask at the same time (``FreshCalls``: each one's
        #: answer is read after it asked)
        self._verified = FreshCalls(self._verify_chain)
        self._completeness = FreshCalls(self._score_evidence)
        self._loads = FreshCalls(self._load_source)
        #: each replay's consumption and policy decisions after its last step here
        self._memory = StepMemory()
        #: how the steps this engine runs are isolated (rule 16), recorded in each STEP_STARTED
        self.isolation = isolation

    async def source(self, run_id: str) -> SourceEvidence:
        """The source evidence, cached: a replay's steps all read the same recording."""
        if run_id in self._cache:
            self._cache.move_to_end(run_id)
            return self._cache[run_id]
        source = await self._loads(run_id)  # sibling replays starting together load it once
        self._cache[run_id] = source
        held = sum(cached.loaded_bytes for cached in self._cache.values())
        while len(self._cache) > 1 and (
            len(self._cache) > self._cache_size or held > self._cache_bytes
        ):
            _, dropped = self._cache.popitem(last=False)
            held -= dropped.loaded_bytes
        return source

    async def _verify_chain(self, run_id: str) -> ChainVerification:
        return await self.ledger.verify(run_id)

    async def _load_source(self, run_id: str) -> SourceEvidence:
        return await load_source_evidence(self.ledger, self.evidence, self.artifacts, run_id)

    async def _score_evidence(self, run_id: str) -> EvidenceCompleteness:
        return await evidence_completeness(self.ledger, self.evidence, self.artifacts, run_id)

    async def verify_source(self, run_id: str) -> ChainVerification:
        """The source run's chain verified (full check) by a verification that began after
        this call, shared with the replays asking at the same time."""
        return await self._verified(run_id)

    async def source_completeness(self, run_id: str) -> EvidenceCompleteness:
        """The source's evidence completeness, scored after this call, shared likewise."""
        return await self._completeness(run_id)

    async def step_source(self, run_id: str) -> ReplaySource:
        """The source as a step reads it (one recorded item at a time): the cached evidence
        here; a sandboxed process's engine asks the worker instead of loading it again."""
        return await self.source(run_id)

    def catalog(self, graph_id: str) -> AgentCatalog:
        try:
            return self.catalogs[graph_id]
        except KeyError:
            raise ReplaybookError(
                f"no agent catalog for graph {graph_id!r}: its code is not deployed on this worker"
            ) from None

    async def live_read_time(
        self, graph_id: str, tool: str, arguments: dict[str, Any], context: ToolCallContext
    ) -> datetime:
        """The logical time a team's READ tool is called with: the replay's own (this process
        records the replay). A sandboxed step's engine asks the worker's guard instead."""
        return context.logical_time

    async def prepare(self, plan: ReplayPlan) -> PreparedReplay:
        """Check the source and the request; each problem names what is missing. On success the
        replay run is created (header and RUN_STARTED with the replay manifest)."""
        return await prepare_replay(self, self._manifests, plan)

    async def run_step(self, step: StepInput) -> StepOutput:
        """Execute one step of the replay, recorded whole or not at all: a retried step
        returns what an earlier attempt recorded instead of running again."""
        return await run_step(self, self._memory, step)

    async def run_steps(self, step: StepInput) -> StepOutput:
        """Run up to ``step.batch_steps()`` steps (an automatic batch also ends once its
        ``activity_batch_seconds()`` have passed, any batch once the replay's deadline has),
        each recorded atomically; their counters are summed and the last step's position is
        returned. A batch also ends after a step that called a live model: each such call may
        take up to the model's timeout (minutes for a small local model on busy cores), and a
        batch of several would outlast the step activity's deadline and the sandbox's
        wall-clock limit (15 minutes each)."""
        total: StepOutput | None = None
        current = step
        seconds = step.plan.activity_batch_seconds()
        ends = None if seconds is None else time.monotonic() + seconds
        for _ in range(step.batch_steps()):
            out = await self.run_step(current)
            total = batch_total(total, out)
            if out.finished or out.next_step is None or out.usage.model_calls:
                break
            if ends is not None and time.monotonic() >= ends:
                break
            # the worker's time, not an agent read (the replay's deadline is wall time)
            if step.past_deadline(system_time()):  # the workflow stops the replay next
                break
            current = next_in_batch(current, out)
        assert total is not None
        return total

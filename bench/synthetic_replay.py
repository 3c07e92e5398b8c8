"""A recorded synthetic run ready for sandboxed replays: the set-up ``bench.bench_pool`` and the
sandbox tests (``tests/activities/sandbox``) share. The stores, an engine with the worker's agent catalogs,
the run (``examples.synthetic``), sandbox runners with the worker's catalog factory, the
first batch of a RECORDED replay of the run and the batch after one.

It lives in ``bench`` because it needs ``worker`` (catalogs) beside ``stores`` and ``examples``,
which no package below the composition roots may import; the tests import it from here.

``record_synthetic_run_bulk`` records the same run in bulk, for the long ones (50,000 steps).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import cast

from pydantic import JsonValue

from activities.sandbox.config import SandboxSettings
from activities.sandbox.runner import SandboxedSteps
from examples.synthetic import record_synthetic_run
from models import ExecutionEvent, ReplayMode, RunRecord, RunStatus
from models.digest import sha256_digest
from models.replay_flow import ReplayPlan, StepInput, StepOutput
from runtime.executor import RunResult
from runtime.ports import ArtifactStore, EventLedger, NewEvent, RawVault, VaultedLedger
from runtime.replay.engine import ReplayEngine
from stores.bundle import Stores, open_stores
from stores.config import StoreSettings
from stores.sql.support_desk_world import SqlWorldStore
from worker.catalogs import catalogs
from worker.temporal import CATALOG_FACTORY


@dataclass
class SyntheticReplays:
    stores: Stores
    engine: ReplayEngine
    #: the recorded synthetic run every replay here replays
    source_run_id: str

    def runner(self, settings: SandboxSettings) -> SandboxedSteps:
        """Sandboxed steps as a replay worker runs them (with its catalog factory)."""
        return SandboxedSteps(self.engine, settings, catalog_factory=CATALOG_FACTORY)

    async def first_step(self, steps_per_activity: int, prefix: str = "replay") -> StepInput:
        """The first batch of a new RECORDED replay of the run, prepared; its id starts with
        ``prefix``."""
        plan = ReplayPlan(
            replay_id=f"{prefix}-{uuid.uuid4().hex[:10]}",
            source_run_id=self.source_run_id,
            mode=ReplayMode.RECORDED,
            steps_per_activity=steps_per_activity,
        )
        prepared = await self.engine.prepare(plan)
        assert prepared.ok, prepared.problems
        return StepInput(
            plan=plan,
            step_id=prepared.start_step,
            state_ref=prepared.state_ref,
            cursors=prepared.cursors,
            head=prepared.head,
        )


def next_batch(step: StepInput, out: StepOutput) -> StepInput:
    """The batch after ``step``, from where its answer ``out`` left the replay."""
    return step.model_copy(
        update={
            "step_id": out.next_step,
            "state_ref": out.state_ref,
            "cursors": out.cursors,
            "head": out.head,
            "step_index": step.step_index + out.steps,
        }
    )


@asynccontextmanager
async def synthetic_replays(settings: StoreSettings, steps: int) -> AsyncIterator[SyntheticReplays]:
    """The stores of ``settings`` with a synthetic run of ``steps`` steps recorded in them,
    open until the block exits."""
    async with open_stores(settings) as stores:
        engine = ReplayEngine(
            stores.ledger,
            stores.evidence,
            stores.artifacts,
            catalogs(SqlWorldStore.beside(stores.db.engine.url)),
        )
        source = await record_synthetic_run(stores.ledger, stores.artifacts, steps)
        yield SyntheticReplays(stores, engine, source.run_id)


#: events appended per ledger call by ``record_synthetic_run_bulk`` (one transaction each)
BULK_EVENTS = 8192


async def record_synthetic_run_bulk(
    ledger: EventLedger, artifacts: ArtifactStore, total: int, run_id: str | None = None
) -> RunResult:
    """The run ``examples.synthetic.record_synthetic_run`` records (the same recorder, graph
    and events), written in bulk for the long runs (50,000 steps): ``BULK_EVENTS`` events per
    ``append_many`` (one transaction), each chunk once the artifacts its events reference are
    put, while the recorder goes on with the next chunk and those artifacts are being put.

    Why: the recorder's own paths wait for each artifact's put (two fsyncs and a writer-thread
    hop, 0.5-1 ms on this machine) and hand each event to the group commit with a future and a
    task, ~1.8 ms a step: minutes for 50,000 steps. Here the puts overlap everything else.
    The run verifies as any recorded run: the same ledger computes its chain."""
    bulk = _BulkLedger(ledger, artifacts)
    # the two stand in for the stores where the recorder looks (not the whole protocols)
    return await record_synthetic_run(
        cast(EventLedger, bulk), cast(ArtifactStore, _BulkArtifacts(bulk)), total, run_id
    )


class _BulkLedger:
    """The ledger as a recorder sees it. Events wait until ``BULK_EVENTS`` of them are there;
    that chunk is then written by a task of its own: it waits for the chunk before it, then
    for its artifacts' puts, then appends its events at the sequences the recorder gave them.
    At most two chunks are in flight (memory stays bounded). Only what ``record_run`` calls is
    here. Not a ``WriteBehindLedger`` (no ``submit``): the recorder takes its direct path, one
    ``append_many`` per event, and nobody reads the event that returns (``append_many``)."""

    def __init__(self, ledger: EventLedger, artifacts: ArtifactStore) -> None:
        assert isinstance(ledger, VaultedLedger), "a ledger that keeps raw content (SqlLedger)"
        self._ledger = ledger
        self._vaulted = ledger
        self._artifacts = artifacts
        self._events: list[NewEvent] = []
        #: the puts started since the last chunk, by digest: its events wait for them
        self._puts: dict[str, asyncio.Task[str]] = {}
        self._writing: asyncio.Task[int] | None = None
        #: the sequence of the last event handed over by the recorder
        self._handed = 0
        self._run_id = ""

    @property
    def vault(self) -> RawVault:
        return self._vaulted.vault

    async def create_run(self, run: RunRecord) -> None:
        self._run_id = run.run_id
        await self._ledger.create_run(run)

    def put(self, data: bytes) -> str:
        """Start the put of ``data`` (once per chunk for the same bytes); its digest."""
        digest = sha256_digest(data)
        if digest not in self._puts:
            self._puts[digest] = asyncio.create_task(self._artifacts.put(data))
        return digest

    async def append_many(
        self, run_id: str, events: Sequence[NewEvent], *, expected_sequence: int | None = None
    ) -> list[ExecutionEvent]:
        assert run_id == self._run_id and expected_sequence in (None, self._handed + 1)
        self._events.extend(events)
        self._handed += len(events)
        if len(self._events) >= BULK_EVENTS:
            await self._hand_chunk()
        # the recorder keeps only the last sequence (it numbers its next checkpoint from it)
        # and drops the event: a stand-in with that sequence, not a chained event
        return [cast(ExecutionEvent, _Handed(self._handed))]

    async def finish_run(
        self, run_id: str, status: RunStatus, outcome: JsonValue = None
    ) -> RunRecord:
        await self._hand_chunk()
        if self._writing is not None:
            await self._writing
        return await self._ledger.finish_run(run_id, status, outcome)

    async def _hand_chunk(self) -> None:
        before = self._writing
        if before is not None and before.done():
            before.result()  # a failed chunk fails the recording at once
        elif before is not None:
            await asyncio.wait([before])  # at most two chunks in flight
        events, self._events = self._events, []
        puts, self._puts = list(self._puts.values()), {}
        self._writing = asyncio.create_task(self._write(before, events, puts))

    async def _write(
        self,
        before: asyncio.Task[int] | None,
        events: list[NewEvent],
        puts: list[asyncio.Task[str]],
    ) -> int:
        """Append ``events`` after the chunk ``before`` and once ``puts`` are done (the
        write-ahead order: evidence before the events that reference it); the last sequence."""
        written = await before if before is not None else 0
        await asyncio.gather(*puts)
        if not events:
            return written
        appended = await self._ledger.append_many(
            self._run_id, events, expected_sequence=written + 1
        )
        return appended[-1].sequence


@dataclass(frozen=True)
class _Handed:
    sequence: int


class _BulkArtifacts:
    """The artifact store as the bulk recorder sees it: a put is started and left to
    ``_BulkLedger``'s chunk to wait for."""

    def __init__(self, bulk: _BulkLedger) -> None:
        self._bulk = bulk

    async def put(self, data: bytes) -> str:
        return self._bulk.put(data)

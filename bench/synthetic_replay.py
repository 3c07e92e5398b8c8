"""A recorded synthetic run ready for sandboxed replays: the set-up ``bench.bench_pool`` and the
sandbox tests (``tests/activities/sandbox``) share. The stores, an engine with the worker's agent catalogs,
the run (``examples.synthetic``), sandbox runners with the worker's catalog factory, the
first batch of a RECORDED replay of the run and the batch after one.

It lives in ``bench`` because it needs ``worker`` (catalogs) beside ``stores`` and ``examples``,
which no package below the composition roots may import; the tests import it from here.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from activities.sandbox.config import SandboxSettings
from activities.sandbox.runner import SandboxedSteps
from examples.synthetic import record_synthetic_run
from models import ReplayMode
from models.replay_flow import ReplayPlan, StepInput, StepOutput
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

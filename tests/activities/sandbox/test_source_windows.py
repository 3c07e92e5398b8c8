"""A sandboxed step reads its source through the worker, a window at a time: every item it can
ask for is the one the worker's decoded evidence holds, it keeps a bounded number of them, it
reads only the replay's own source, and a sandboxed replay (RECORDED or a fork) records what
the same replay records in the worker's process without the child ever loading the run."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from activities.sandbox import source_windows
from activities.sandbox.broker import StepBroker
from activities.sandbox.config import SandboxSettings
from activities.sandbox.source_windows import BrokeredSource
from app.local_replay import run_prepared
from bench.synthetic_replay import next_batch, synthetic_replays
from models import ReplayMode
from models.errors import SandboxViolationError
from models.replay_flow import ReplayCursorsView, ReplayPlan, StepInput
from runtime.replay.engine import ReplayEngine
from runtime.replay.source import SourceEvidence
from stores.bundle import open_stores
from tests.activities.sandbox.test_broker_guard import QUOTAS
from tests.activities.sandbox.test_pool import _recorded
from tests.fixtures_replay import stack_settings


@pytest.fixture
async def stores(tmp_path: Path):
    async with open_stores(stack_settings(tmp_path, "unused").stores) as opened:
        yield opened


async def _support_desk_broker(stores: Any) -> tuple[StepBroker, SourceEvidence]:
    """A broker for a replay of a recorded support-desk run (model calls, tool calls,
    retrievals, an approved write; clock readings added), and the worker's decoded evidence
    of it (what the broker serves)."""
    from examples.support_desk.catalog import support_desk_catalog
    from examples.support_desk.providers import SimulatedWorld
    from examples.support_desk.spec import run_scenario
    from stores.sql.support_desk_world import SqlWorldStore

    world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
    await world.ensure()
    source = await run_scenario(world, stores.ledger, stores.artifacts, "happy", seed=1)
    engine = ReplayEngine(
        stores.ledger,
        stores.evidence,
        stores.artifacts,
        {"support-desk": support_desk_catalog(None)},
    )
    plan = ReplayPlan(
        replay_id=f"replay-windows-{uuid.uuid4().hex[:8]}",
        source_run_id=source.run_id,
        mode=ReplayMode.RECORDED,
    )
    step = StepInput(plan=plan, step_id="x", state_ref=None, cursors=ReplayCursorsView(), head=1)
    broker = await StepBroker.open(engine, step, QUOTAS)
    evidence = await engine.source(source.run_id)
    # the scenario reads no clock: readings as a run that reads it has them
    readings = [evidence.start_time + timedelta(seconds=7 * i) for i in range(5)]
    evidence = dataclasses.replace(evidence, clock_reads=readings)
    engine._cache[source.run_id] = evidence
    return broker, evidence


def _calling(broker: StepBroker, loop: asyncio.AbstractEventLoop, calls: list[str]) -> Callable:
    """The child's blocking ``call``, served by ``broker`` on ``loop`` (from another thread)."""

    def call(method: str, params: dict[str, Any]) -> Any:
        calls.append(method)
        return asyncio.run_coroutine_threadsafe(broker.handle(method, params), loop).result()

    return call


async def test_every_item_a_step_can_read_is_the_workers(
    stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(source_windows, "WINDOW", 2)  # windows end inside the run
    broker, evidence = await _support_desk_broker(stores)
    assert evidence.model_responses and evidence.clock_reads and evidence.fixtures
    assert evidence.retrievals and evidence.approvals and evidence.side_effects
    calls: list[str] = []
    call = _calling(broker, asyncio.get_running_loop(), calls)

    def read_all() -> None:
        child = BrokeredSource(call, evidence.run.run_id)
        assert (child.run, child.agent_input, child.seed, child.start_time) == (
            evidence.run,
            evidence.agent_input,
            evidence.seed,
            evidence.start_time,
        )
        calls_before = len(calls)
        count = evidence.model_call_count()
        assert child.model_call_count() == count
        for i in range(count + 2):
            assert child.model_response(i) == evidence.model_response(i)
            assert child.model_prompt(i) == evidence.model_prompt(i)
        for i in range(len(evidence.clock_reads) + 2):
            assert child.clock_at(i) == evidence.clock_at(i)
        # read in the order recorded, then each hash past its last repeat (a miss)
        for key in evidence.fixture_order:
            used = sum(1 for k in evidence.fixture_order[: len(evidence.fixture_order)] if k == key)
            for repeat in range(used + 1):
                assert child.fixture(key, repeat) == evidence.fixture(key, repeat)
        for key, recorded in evidence.retrievals.items():
            for repeat in range(len(recorded) + 1):
                assert child.retrieval(key, repeat) == evidence.retrieval(key, repeat)
        assert child.fixture("sha256:never", 0) is None
        for key in [*evidence.approvals, "sha256:never"]:
            assert child.approval(key) == evidence.approval(key)
        for key, effect in evidence.side_effects.items():
            assert child.side_effect(key) == effect
            assert child.provider_fixture(effect.provider_request_id) == (
                evidence.provider_fixture(effect.provider_request_id)
            )
        for step in [*evidence.starts, "no-such-step"]:
            assert child.fork_point(step) == evidence.fork_point(step)
        # nothing here loaded the run: only the windows the reads asked for
        assert set(calls[calls_before:]) <= {
            "source.items",
            "source.fixtures",
            "source.lookup",
            "source.fork",
        }

    await asyncio.to_thread(read_all)
    assert "ledger.events_with_payloads" not in calls and broker.violation is None


async def test_reads_in_recorded_order_take_one_call_a_window(
    stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(source_windows, "WINDOW", 3)
    monkeypatch.setattr(source_windows, "KEPT_FIXTURES", 6)
    from examples.synthetic import GRAPH_ID, record_synthetic_run, synthetic_catalog

    run = await record_synthetic_run(stores.ledger, stores.artifacts, 10)
    engine = ReplayEngine(
        stores.ledger, stores.evidence, stores.artifacts, {GRAPH_ID: synthetic_catalog()}
    )
    plan = ReplayPlan(replay_id="replay-order", source_run_id=run.run_id, mode=ReplayMode.RECORDED)
    step = StepInput(plan=plan, step_id="x", state_ref=None, cursors=ReplayCursorsView(), head=1)
    broker = await StepBroker.open(engine, step, QUOTAS)
    evidence = await engine.source(run.run_id)
    calls: list[str] = []
    call = _calling(broker, asyncio.get_running_loop(), calls)

    def read_in_order() -> BrokeredSource:
        child = BrokeredSource(call, run.run_id)
        for key in evidence.fixture_order:  # ten distinct requests, each recorded once
            assert child.fixture(key, 0) == evidence.fixture(key, 0)
        return child

    child = await asyncio.to_thread(read_in_order)
    # the header, then one call per window of three: 10 fixtures in 4 calls
    assert calls == ["source.header"] + ["source.fixtures"] * 4
    assert len(child._fixtures) <= 6  # bounded, whatever the run's length


async def test_only_the_replays_own_source_is_served(stores: Any) -> None:
    broker, evidence = await _support_desk_broker(stores)
    with pytest.raises(SandboxViolationError, match="only the replay's own"):
        await broker.handle("source.header", {"run_id": "run-of-someone-else"})
    assert broker.violation is not None
    # the batch is poisoned: its own source is refused now too
    with pytest.raises(SandboxViolationError, match="earlier call"):
        await broker.handle("source.header", {"run_id": evidence.run.run_id})


class LoadCountingLedger:
    """The worker's ledger, noting every run whose events are read with their payloads."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.loaded: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def events_with_payloads(self, run_id: str, **kwargs: Any) -> Any:
        self.loaded.append(run_id)
        return await self.inner.events_with_payloads(run_id, **kwargs)


@pytest.mark.parametrize("fork", [False, True])
async def test_a_sandboxed_replay_records_the_same_without_loading_the_run(
    tmp_path: Path, fork: bool
) -> None:
    async with synthetic_replays(stack_settings(tmp_path, "unused").stores, 10) as replays:
        engine = replays.engine
        source_run_id = replays.source_run_id
        extra: dict[str, Any] = (
            {"mode": ReplayMode.FORK_FROM_STEP, "from_step": "s00007"} if fork else {}
        )

        def plan(prefix: str) -> ReplayPlan:
            return ReplayPlan(
                replay_id=f"{prefix}-{uuid.uuid4().hex[:8]}",
                source_run_id=source_run_id,
                mode=extra.get("mode", ReplayMode.RECORDED),
                from_step=extra.get("from_step"),
                steps_per_activity=2,
            )

        # in the worker's process (the development flag's path)
        local = plan("replay-local")
        totals = await run_prepared(engine, local, await engine.prepare(local))
        assert totals.stopped is None and totals.steps == (3 if fork else 10)

        sandboxed = plan("replay-sandboxed")
        prepared = await engine.prepare(sandboxed)  # the worker decodes the source here
        assert prepared.ok, prepared.problems
        counting = LoadCountingLedger(engine.ledger)
        engine.ledger = counting
        runner = replays.runner(SandboxSettings(warm_processes=0))
        step = StepInput(
            plan=sandboxed,
            step_id=prepared.start_step,
            state_ref=prepared.state_ref,
            cursors=prepared.cursors,
            head=prepared.head,
        )
        try:
            while True:
                out = await runner.run_steps(step)
                assert out.stopped is None, out.stopped
                if out.finished:
                    break
                step = next_batch(step, out)
        finally:
            await runner.aclose()
        assert source_run_id not in counting.loaded  # the child never loaded the source
        assert await _recorded(replays.stores.ledger, sandboxed.replay_id) == await _recorded(
            replays.stores.ledger, local.replay_id
        )

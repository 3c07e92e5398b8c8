"""The sandbox's fast paths, held to correctness: artifacts carried on the next call's frame
(one message a step) are stored before that call and only as named; a replay engine that ran
the step before neither reads the replay's policy decisions nor its tail again, and answers
the same as an engine that reads them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from activities.sandbox import codec
from activities.sandbox.proxies import ProxyArtifacts
from models import PolicyDecisionRecord, ReplayMode
from models.digest import sha256_digest
from models.errors import SandboxViolationError
from models.redaction import REDACT_V1, redaction_policy
from runtime.replay.engine import ReplayEngine
from stores.bundle import open_stores
from tests.activities.sandbox.test_broker_guard import CountingModel, _broker
from tests.fixtures_replay import stack_settings


@pytest.fixture
async def stores(tmp_path: Path):
    async with open_stores(stack_settings(tmp_path, "unused").stores) as opened:
        yield opened


async def test_a_put_costs_no_message_and_rides_on_the_next_call() -> None:
    frames: list[tuple[str, dict[str, Any]]] = []
    unsent: list[dict[str, Any]] = []

    def call(method: str, params: dict[str, Any]) -> Any:
        frames.append((method, params))
        return True

    artifacts = ProxyArtifacts(call, unsent)
    data = b'{"state": 1}'
    digest = await artifacts.put(data)
    assert digest == sha256_digest(data) and frames == []
    assert unsent == [{"data": codec.b64(data), "digest": digest}]
    # read back here without a message, and known to exist
    assert await artifacts.get(digest) == data and await artifacts.exists(digest)
    assert frames == []


async def test_carried_puts_are_stored_before_the_call_and_only_as_named(stores) -> None:
    broker, _, _ = await _broker(stores, CountingModel(), {"mode": ReplayMode.RECORDED})
    data = b'{"state": "carried"}'
    digest = sha256_digest(data)
    # the call served after the put sees it stored
    exists = await broker.handle(
        "artifacts.exists",
        {"digest": digest},
        [{"data": codec.b64(data), "digest": digest}],
    )
    assert exists is True and await stores.artifacts.get(digest) == data
    assert broker.written == len(data)

    broker, _, _ = await _broker(stores, CountingModel(), {"mode": ReplayMode.RECORDED})
    other = sha256_digest(b"something else")
    with pytest.raises(SandboxViolationError, match="carried artifact named"):
        await broker.handle("artifacts.flush", {}, [{"data": codec.b64(data), "digest": other}])
    assert broker.violation is not None

    broker, _, _ = await _broker(stores, CountingModel(), {"mode": ReplayMode.RECORDED})
    broker.guard.redaction = redaction_policy(REDACT_V1, frozenset())
    raw = b'{"email": "ada@example.com"}'
    with pytest.raises(SandboxViolationError, match="sanitizing would change"):
        await broker.handle(
            "artifacts.flush", {}, [{"data": codec.b64(raw), "digest": sha256_digest(raw)}]
        )
    assert not await stores.artifacts.exists(sha256_digest(raw))


class CountingEvidence:
    """The real evidence reader, counting the replay's policy-decision reads."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.decision_reads = 0

    async def records(self, record_type: Any, run_id: str) -> list[Any]:
        if record_type is PolicyDecisionRecord and run_id.startswith("replay-"):
            self.decision_reads += 1
        return await self.inner.records(record_type, run_id)

    async def record(self, record_type: Any, key: str) -> Any:
        return await self.inner.record(record_type, key)


class CountingLedger:
    """The real ledger, counting reads of a replay's tail (``events`` from a sequence)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.tail_reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def events(self, run_id: str, *, from_sequence: int = 1) -> Any:
        if from_sequence > 1:
            self.tail_reads += 1
        return await self.inner.events(run_id, from_sequence=from_sequence)


async def _replay(engine: ReplayEngine, replay_id: str, source_run_id: str, fresh: bool) -> Any:
    """The replay run step by step, as the workflow does; ``fresh``: every step in a new
    engine over the same stores (the path of a step run by another process)."""
    from app.local_replay import run_prepared
    from models.replay_flow import ReplayPlan

    plan = ReplayPlan(
        replay_id=replay_id,
        source_run_id=source_run_id,
        mode=ReplayMode.RECORDED,
        steps_per_activity=1,  # one step per batch: each batch is a step of its own
    )
    prepared = await engine.prepare(plan)
    assert prepared.ok, prepared.problems
    if fresh:
        original = ReplayEngine.run_steps

        async def run_steps(step: Any) -> Any:
            other = ReplayEngine(engine.ledger, engine.evidence, engine.artifacts, engine.catalogs)
            return await original(other, step)

        engine.run_steps = run_steps  # type: ignore[method-assign]
    return await run_prepared(engine, plan, prepared)


async def test_an_engine_that_ran_the_step_before_reads_neither_decisions_nor_tail(
    stores,
) -> None:
    from examples.support_desk.catalog import support_desk_catalog
    from examples.support_desk.providers import SimulatedWorld
    from examples.support_desk.spec import run_scenario
    from runtime.trajectory import load_trajectory
    from stores.sql.support_desk_world import SqlWorldStore

    world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
    await world.ensure()
    source = await run_scenario(world, stores.ledger, stores.artifacts, "happy", seed=1)
    counters, trajectories, totals = {}, {}, {}
    for name in ("cached", "fresh"):
        evidence = CountingEvidence(stores.evidence)
        ledger = CountingLedger(stores.ledger)
        engine = ReplayEngine(
            ledger,
            evidence,
            stores.artifacts,
            {"support-desk": support_desk_catalog(None)},
        )
        replay_id = f"replay-{name}-{source.run_id[-8:]}"
        totals[name] = await _replay(engine, replay_id, source.run_id, fresh=name == "fresh")
        counters[name] = (evidence.decision_reads, ledger.tail_reads)
        trajectories[name] = await load_trajectory(stores.ledger, replay_id)
        assert (await stores.ledger.verify(replay_id)).intact
    steps = totals["cached"].steps
    assert steps >= 3 and totals["fresh"].steps == steps
    assert totals["cached"].stopped is None and totals["fresh"].stopped is None
    # the same replay either way: steps, tool calls, policy decisions, outcome
    cached, fresh = trajectories["cached"], trajectories["fresh"]
    assert cached.steps == fresh.steps and cached.tool_calls == fresh.tool_calls
    assert cached.policy_decisions == fresh.policy_decisions and cached.outcome == fresh.outcome
    assert counters["fresh"] == (steps, steps)
    assert counters["cached"] == (1, 1)  # only the replay's first step reads them

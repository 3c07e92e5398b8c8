"""Real models in the loop, against the real local server (few calls, small ``max_tokens``):
the registry answers, a support-desk run decided by a real model verifies and replays RECORDED
with zero model calls, MODEL_SWAP calls the server with its usage counted, and the budget stops
a replay by tokens."""

from __future__ import annotations

import json
import uuid

from app.local_replay import run_prepared
from app.model_registry import list_models
from examples.support_desk.real_model import SupportDeskJsonModel
from examples.support_desk.spec import run_scenario
from models import ExecutionEventType, FixtureMissPolicy, ReplayMode
from models.replay import ReplayBudget
from models.replay_flow import ReplayPlan
from runtime.replay.engine import ReplayEngine
from tests.local_models.conftest import ModelStack
from worker.catalogs import catalogs


async def test_both_local_models_answer(model_stack: ModelStack) -> None:
    rows = {r["name"]: r for r in await list_models(model_stack.settings.model_registry)}
    assert set(rows) == {"smollm2-135m", "gemma3-270m"}
    for row in rows.values():
        assert row["answers"], row["error"]
        # one token at most (a model may also answer with its end-of-turn token alone)
        assert row["latency_ms"] > 0 and row["usage"]["completion_tokens"] <= 1
        assert row["usage"]["prompt_tokens"] > 0
        assert row["source"] == "local" and row["context_length"]


async def _record(stack: ModelStack, model: str) -> str:
    registry = stack.settings.model_registry
    provider = registry.provider(model)
    try:
        result = await run_scenario(
            stack.world,
            stack.stores.ledger,
            stack.stores.artifacts,
            "wrong-customer",
            seed=1,
            model=SupportDeskJsonModel(model, provider),
            model_name=model,
        )
    finally:
        await provider.aclose()
    return result.run_id


def _engine(stack: ModelStack) -> ReplayEngine:
    world = stack.world.store  # the same simulated world the run was recorded against
    agents = catalogs(world, None, stack.settings.model_registry)
    for catalog in agents.values():  # each registry model's provider, closed after the test
        stack.closing.extend(getattr(m, "inner", m) for m in catalog.models.values())
    return ReplayEngine(stack.stores.ledger, stack.stores.evidence, stack.stores.artifacts, agents)


async def _replay(stack: ModelStack, run_id: str, mode: ReplayMode, **plan: object):
    engine = _engine(stack)
    replay = ReplayPlan(
        replay_id=f"replay-{uuid.uuid4().hex[:12]}",
        source_run_id=run_id,
        mode=mode,
        **plan,
    )
    prepared = await engine.prepare(replay)
    assert prepared.ok, prepared.problems
    return await run_prepared(engine, replay, prepared)


async def test_a_real_model_run_verifies_and_replays(model_stack: ModelStack) -> None:
    stores = model_stack.stores
    run_id = await _record(model_stack, "smollm2-135m")
    assert (await stores.ledger.verify(run_id)).intact
    run = await stores.ledger.get_run(run_id)
    assert run.pinned.model_profile is not None
    assert "smollm2-135m" in run.pinned.model_profile
    calls = [
        json.loads(await stores.ledger.payload(e))
        for e in await stores.ledger.events(run_id)
        if e.type is ExecutionEventType.MODEL_CALL
    ]
    assert calls and all(c["usage"]["completion_tokens"] > 0 for c in calls)
    planned = json.loads(calls[0]["response"]["content"])
    assert planned["customer_lookup"] in ("crm.get_customer", "crm.find_by_phone")

    recorded = await _replay(model_stack, run_id, ReplayMode.RECORDED)
    assert recorded.model_calls == 0 and recorded.tokens == 0 and recorded.stopped is None

    # EXACT: the recorded model, found in the registry by the recorded profile, called live.
    # The server's prompt cache can tip a sampled decision even with the recorded seed. A
    # customer-id lookup the run did not record is then read live (sandbox-live); a lookup by
    # phone (a personal field, not allowed live) the run did not record stops the replay on
    # that miss, by name. Either way the live model answered.
    live = FixtureMissPolicy.SANDBOX_LIVE
    exact = await _replay(model_stack, run_id, ReplayMode.EXACT, miss_policy=live)
    assert exact.model_calls >= 1
    if exact.stopped is not None:
        assert "crm.find_by_phone" in exact.stopped, exact.stopped
        assert planned["customer_lookup"] == "crm.get_customer", exact.stopped
    assert exact.tokens > exact.model_calls  # the usage the server reported, counted

    swapped = await _replay(
        model_stack,
        run_id,
        ReplayMode.MODEL_SWAP,
        model_name="gemma3-270m",
        sampling_seed=7,
        miss_policy=live,
    )
    assert swapped.model_calls >= 1 and swapped.stopped is None and swapped.tokens > 0

    stopped = await _replay(
        model_stack,
        run_id,
        ReplayMode.MODEL_SWAP,
        model_name="smollm2-135m",
        budget=ReplayBudget(max_tokens=50),
    )
    # a call whose worst case (its prompt plus max_tokens) does not fit what is left is refused
    # before it is made: at most one call fits in 50 tokens, and the budget ends the replay
    assert stopped.model_calls <= 1
    assert stopped.stopped is not None and "max_tokens 50" in stopped.stopped

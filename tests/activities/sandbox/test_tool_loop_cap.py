"""The per-replay cap on a tool loop's model calls (``--max-loop-calls``), on a sandboxed
model-swap replay of an imported tau-bench run: a model that keeps calling tools is stopped at
the cap, the replay is INCONCLUSIVE for the reason BUDGET, and the benchmark does not score it
(Replaybook's own truncation is no benchmark result). The model is a scripted chat-completions server
(real HTTP) offered the tools in the prompt, and each model call records the body the worker's
provider sent, although the step ran in the sandboxed child."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from activities.sandbox.config import SandboxSettings
from activities.sandbox.setup import sandboxed_steps
from app.local_replay import run_prepared
from integrations.tau_bench.world.live import TauWorlds, replay_counterfactual
from models import ExecutionEventType, FixtureMissPolicy, ReplayMode
from models.enums import InconclusiveReason, ReplayVerdict
from models.replay_flow import ReplayPlan
from models.verdicts import stop_verdict
from runtime.providers.registry import ModelRegistrySettings
from runtime.replay.engine import ReplayEngine
from stores.bundle import Stores, open_stores
from tests.fixtures_replay import stack_settings
from tests.fixtures_tau import ENV_DATA, import_shortest_airline_run
from tests.runtime.chat_server import ChatServer, text_answer
from worker.catalogs import catalogs
from worker.temporal import CATALOG_FACTORY

CAP = 2
READ = {"tool_call": {"name": "get_user_details", "arguments": {"user_id": "anya_garcia_5901"}}}


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[Stores]:
    async with open_stores(stack_settings(tmp_path, "unused").stores) as opened:
        yield opened


async def test_a_tool_loop_stopped_by_its_cap_is_inconclusive_and_not_scored(
    stores: Stores, tmp_path: Path
) -> None:
    run_id = await import_shortest_airline_run(stores, tmp_path)
    worlds = TauWorlds(stores.ledger, stores.artifacts, stores.evidence, ENV_DATA)
    with ChatServer() as server:
        # more answers than the cap allows: the cap, not the script, ends the replay
        server.script(*(text_answer(json.dumps(READ), prompt_tokens=50) for _ in range(CAP + 3)))
        registry = ModelRegistrySettings.model_validate(
            {
                "REPLAYBOOK_MODELS": json.dumps(
                    {
                        "scripted": {
                            "base_url": server.base_url,
                            "model_id": "m",
                            "tool_calling": "prompt",
                        }
                    }
                )
            }
        )
        agents = catalogs(None, None, registry, worlds)
        engine = ReplayEngine(stores.ledger, stores.evidence, stores.artifacts, agents)
        runner = sandboxed_steps(
            engine, SandboxSettings(warm_processes=0), catalog_factory=CATALOG_FACTORY
        )
        assert runner is not None
        plan = ReplayPlan(
            replay_id=f"replay-cap-{uuid.uuid4().hex[:8]}",
            source_run_id=run_id,
            mode=ReplayMode.MODEL_SWAP,
            model_name="scripted",
            miss_policy=FixtureMissPolicy.SANDBOX_LIVE,
            max_loop_calls=CAP,
        )
        prepared = await engine.prepare(plan)
        assert prepared.ok, prepared.problems
        try:
            totals = await run_prepared(runner, plan, prepared)  # type: ignore[arg-type]
        finally:
            for model in agents["tool-loop"].models.values():
                await model.aclose()  # type: ignore[attr-defined]
            await runner.aclose()
        received = server.bodies

    # stopped at the cap, before a third call reached the server
    assert totals.stopped is not None
    assert totals.stopped.startswith(f"BudgetExhaustedError: max_loop_calls {CAP} reached")
    assert len(received) == CAP and totals.model_calls == CAP
    verdict = stop_verdict(totals.stopped, reproduced=False)  # as the Replay workflow decides
    assert verdict.verdict is ReplayVerdict.INCONCLUSIVE
    assert verdict.inconclusive_reason is InconclusiveReason.BUDGET

    # cut short by Replaybook's own cap: no benchmark verdict (not a reward 0)
    scored = await replay_counterfactual(worlds, plan.replay_id, run_id)
    assert scored is not None and scored.counterfactual_reward is None
    assert f"max_loop_calls {CAP}" in scored.reason and "not scored" in scored.reason
    assert scored.mutating_calls == 0

    # each model call recorded the body the worker sent (the sandboxed child compiled it the
    # same way), the replay's sampling seed included, a different one per call
    calls = [
        json.loads(await stores.ledger.payload(e))
        for e in await stores.ledger.events(plan.replay_id)
        if e.type is ExecutionEventType.MODEL_CALL
    ]
    assert len(calls) == CAP
    for call, body in zip(calls, received, strict=True):
        sent = json.loads(await stores.artifacts.get(call["sent_request_ref"]))
        assert sent == body
        assert isinstance(sent["seed"], int) and call["seed"] == sent["seed"]
        assert call["sent_request_hash"].startswith("sha256:")
    assert len({body["seed"] for body in received}) == CAP
    # the tools in the prompt, the answer constrained to each tool's own arguments
    assert "tools" not in received[0]
    alternatives = received[0]["response_format"]["schema"]["anyOf"]
    get_user = next(
        a["properties"]["tool_call"]["properties"]
        for a in alternatives[:-1]
        if a["properties"]["tool_call"]["properties"]["name"] == {"const": "get_user_details"}
    )
    assert get_user["arguments"]["required"] == ["user_id"]


def test_the_plan_defaults_to_a_cap_and_zero_means_none() -> None:
    from app.replays import new_plan
    from models.errors import InvalidInputError
    from models.replay_flow import DEFAULT_MAX_LOOP_CALLS

    assert new_plan("run-1", ReplayMode.MODEL_SWAP, model="m").max_loop_calls == (
        DEFAULT_MAX_LOOP_CALLS
    )
    assert new_plan("run-1", ReplayMode.EXACT, max_loop_calls=0).max_loop_calls is None
    assert new_plan("run-1", ReplayMode.EXACT, max_loop_calls=9).max_loop_calls == 9
    with pytest.raises(InvalidInputError, match="max_loop_calls must not be negative"):
        new_plan("run-1", ReplayMode.EXACT, max_loop_calls=-1)
    plan = new_plan("run-1", ReplayMode.EXACT)
    # only a tool loop's length is the model's choice: other graphs are not capped
    assert plan.loop_call_cap("tool-loop") == DEFAULT_MAX_LOOP_CALLS
    assert plan.loop_call_cap("support-desk") is None
    # an imported tau-bench run replays by default to its own (the benchmark's) limit, 30
    # steps as the importer records it; a cap asked for still applies
    tau = {"source": "tau-bench"}
    assert plan.loop_call_cap("tool-loop", tau) is None
    asked = new_plan("run-1", ReplayMode.EXACT, max_loop_calls=6)
    assert asked.loop_call_cap("tool-loop", tau) == 6


async def test_an_imported_tau_bench_run_replays_to_the_benchmarks_own_limit(
    stores: Stores, tmp_path: Path
) -> None:
    """Without ``--max-loop-calls`` a tau-bench run is not cut at the default 6 calls: the
    benchmark allows 30 steps, and a replay that keeps calling tools gets them."""
    from app.replays import new_plan
    from models.replay_flow import DEFAULT_MAX_LOOP_CALLS

    run_id = await import_shortest_airline_run(stores, tmp_path)
    worlds = TauWorlds(stores.ledger, stores.artifacts, stores.evidence, ENV_DATA)
    calls = DEFAULT_MAX_LOOP_CALLS + 2
    with ChatServer() as server:
        server.script(*(text_answer(json.dumps(READ), prompt_tokens=50) for _ in range(calls)))
        server.script(*(text_answer('{"content": "Done."}') for _ in range(4)))
        endpoint = {"base_url": server.base_url, "model_id": "m", "tool_calling": "prompt"}
        registry = ModelRegistrySettings.model_validate(
            {"REPLAYBOOK_MODELS": json.dumps({"scripted": endpoint})}
        )
        agents = catalogs(None, None, registry, worlds)
        engine = ReplayEngine(stores.ledger, stores.evidence, stores.artifacts, agents)
        plan = new_plan(
            run_id, ReplayMode.MODEL_SWAP, model="scripted", miss=FixtureMissPolicy.SANDBOX_LIVE
        )
        prepared = await engine.prepare(plan)
        assert prepared.ok, prepared.problems
        try:
            totals = await run_prepared(engine, plan, prepared)
        finally:
            for model in agents["tool-loop"].models.values():
                await model.aclose()  # type: ignore[attr-defined]
    assert totals.model_calls > DEFAULT_MAX_LOOP_CALLS
    assert "max_loop_calls" not in (totals.stopped or "")

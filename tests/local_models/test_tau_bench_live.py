"""An imported tau-bench run replayed against a real local model (issue 18, item 6): the
model-swap replay runs through the tool-calling loop with the recorded system prompt, tools and
user turns, tool calls the source did not record are answered by our world tools on a private
copy (``sandbox-live``), and the replay ends with the benchmark's counterfactual verdict. The
shared database never changes and no write is executed."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from activities.observe import replay_run_facts
from app.local_replay import run_prepared
from integrations.tau_bench.world.live import TauWorlds, replay_counterfactual
from models import ExecutionEventType, FixtureMissPolicy, ReplayMode
from models.enums import InconclusiveReason
from models.errors import InvalidInputError
from models.model_call import ChatMessage, ModelRequest, ModelResponse
from models.replay_flow import ReplayPlan
from models.verdicts import stop_verdict
from runtime.providers.prompt_tools import TOOLS_BEGIN, TOOLS_END
from runtime.replay.engine import ReplayEngine
from runtime.tools import ToolCallContext
from tests.fixtures_tau import AIRLINE_VERSION, ENV_DATA, import_shortest_airline_run
from tests.local_models.conftest import ModelStack
from worker.catalogs import catalogs

VERSION = AIRLINE_VERSION
#: model calls the replay may make, and tokens per answer: the test stays short
CAP = 1
ANSWER_TOKENS = 48
#: seconds one model call may take here: the first call evaluates the recorded system prompt
#: (about 1,300 tokens; 3,800 on an endpoint that renders the tools) and may write up to 256
#: tokens; at a load average of 12 on two cores that took more than 120 s (40 prompt tokens/s);
#: later calls reuse the server's cached prefix
FIRST_CALL_TIMEOUT = 480


class ShortAnswers:
    """The registry's provider with each answer cut at ``max_tokens`` (the tool loop asks for
    256): what the test waits for is the server's generation."""

    def __init__(self, inner: Any, max_tokens: int) -> None:
        self.inner, self.max_tokens, self.profile = inner, max_tokens, inner.profile

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return await self.inner.complete(request.model_copy(update={"max_tokens": self.max_tokens}))


def _tools(system: str) -> list[dict[str, Any]]:
    """The tools rendered in a system message (one JSON line each)."""
    block = system.split(TOOLS_BEGIN)[1].split(TOOLS_END)[0]
    return [json.loads(line) for line in block.strip().splitlines()]


def _files_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.json")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


async def test_a_tau_bench_model_swap_ends_with_the_benchmarks_verdict(
    model_stack: ModelStack, tmp_path: Path
) -> None:
    stores = model_stack.stores
    run_id = await import_shortest_airline_run(stores, tmp_path)
    worlds = TauWorlds(stores.ledger, stores.artifacts, stores.evidence, ENV_DATA)
    files_before = _files_digest(ENV_DATA / VERSION / "airline")
    base = worlds.base(VERSION, "airline")
    base_hash = base.initial_hash

    registry = model_stack.settings.model_registry.model_copy(
        update={"timeout": FIRST_CALL_TIMEOUT}
    )
    agents = catalogs(None, None, registry, worlds)
    for catalog in agents.values():  # each registry model's provider, closed after the test
        model_stack.closing.extend(getattr(m, "inner", m) for m in catalog.models.values())
    loop = agents["tool-loop"]
    # short answers: a tool call of the world fits in them (a cut one is kept as content)
    short = ShortAnswers(loop.models["gemma3-270m"], ANSWER_TOKENS)
    agents = {**agents, "tool-loop": dataclasses.replace(loop, models={"gemma3-270m": short})}
    engine = ReplayEngine(stores.ledger, stores.evidence, stores.artifacts, agents)
    plan = ReplayPlan(
        replay_id=f"replay-{uuid.uuid4().hex[:12]}",
        source_run_id=run_id,
        mode=ReplayMode.MODEL_SWAP,
        model_name="gemma3-270m",
        sampling_seed=3,
        miss_policy=FixtureMissPolicy.SANDBOX_LIVE,
        # the per-replay cap: one model call, then the replay stops (unless that call ended
        # the episode), INCONCLUSIVE (BUDGET) and not scored (Replaybook's own truncation)
        max_loop_calls=CAP,
    )
    prepared = await engine.prepare(plan)
    assert prepared.ok, prepared.problems
    totals = await run_prepared(engine, plan, prepared)
    assert totals.model_calls == CAP and totals.usage.tokens > 0

    verdict = await replay_counterfactual(worlds, plan.replay_id, run_id)
    assert verdict is not None
    assert verdict.counterfactual_reward in (None, 0, 1) and verdict.reason
    assert verdict.db_version == VERSION and verdict.expected_hash
    if totals.stopped is not None:  # the cap stopped it (the model did not end the episode)
        assert totals.stopped.startswith(f"BudgetExhaustedError: max_loop_calls {CAP}")
        stopped = stop_verdict(totals.stopped, reproduced=False)
        assert stopped.inconclusive_reason is InconclusiveReason.BUDGET
        assert verdict.counterfactual_reward is None and "max_loop_calls" in verdict.reason
    else:  # the model ended the episode: the benchmark scores it
        assert verdict.counterfactual_reward in (0, 1)
    print(f"\ncounterfactual_reward={verdict.counterfactual_reward}: {verdict.reason}")

    # the local models are registered with ``tool_calling: "prompt"``: the body sent carries
    # the recorded system prompt with the tools rendered, and the server counted them
    events = await stores.ledger.events(plan.replay_id)
    calls = [
        json.loads(await stores.ledger.payload(e))
        for e in events
        if e.type is ExecutionEventType.MODEL_CALL
    ]
    assert calls and all("sent_request_ref" in c for c in calls)
    sent = json.loads(await stores.artifacts.get(calls[0]["sent_request_ref"]))
    system = sent["messages"][0]["content"]
    assert sent["messages"][0]["role"] == "system" and TOOLS_BEGIN in system
    assert '"name": "get_user_details"' in system
    names = [
        a["properties"]["tool_call"]["properties"]["name"]
        for a in sent["response_format"]["schema"]["anyOf"][:-1]
    ]
    assert {"const": "get_user_details"} in names
    # the grammar holds the model to the arguments of the tool it names
    offered = {t["name"]: t["parameters"] for t in _tools(system)}
    for call in calls:
        for asked in call["response"]["tool_calls"]:
            jsonschema.validate(asked["arguments"], offered[asked["name"]])
    # the same conversation without the tools block, one token: fewer prompt tokens
    provider = registry.provider("gemma3-270m")
    model_stack.closing.append(provider)
    bare = ModelRequest(
        model="gemma3-270m",
        messages=(
            ChatMessage(role="system", content=system.split(TOOLS_BEGIN)[0].rstrip()),
            *(ChatMessage(role=m["role"], content=m["content"]) for m in sent["messages"][1:]),
        ),
        max_tokens=1,
    )
    without = (await provider.complete(bare)).usage.prompt_tokens
    with_tools = calls[0]["usage"]["prompt_tokens"]
    assert with_tools > without
    # reported, not asserted (whatever the model does): its tool calls, and what answered them
    asked = [t["name"] for c in calls for t in c["response"]["tool_calls"]]
    tools = [
        (e.type.value, json.loads(await stores.ledger.payload(e)).get("capability_id"))
        for e in events
        if e.type
        in (
            ExecutionEventType.TOOL_CALL,
            ExecutionEventType.FIXTURE_MISS,
            ExecutionEventType.WRITE_BLOCKED,
        )
    ]
    print(f"prompt_tokens with tools {with_tools}, without {without}")
    print(f"model calls {len(calls)}, tool calls asked {asked}, tool events {tools}")

    # the live READ the sandbox-live policy allows: the world's answer on the private copy of
    # the replay's source version; a WRITE is never answered live
    readers = await worlds.read_providers()
    context = ToolCallContext(run_id=plan.replay_id, logical_time=datetime.now(UTC))
    answer = await readers["get_user_details"]({"user_id": "anya_garcia_5901"}, context)
    assert json.loads(answer["output"]) == base.tables["users"]["anya_garcia_5901"]
    with pytest.raises(InvalidInputError, match="WRITE tool"):
        await readers["cancel_reservation"]({"reservation_id": "JMO1MG"}, context)

    # no write left the private copy: none executed (as ``replay status`` counts them), the
    # shared base and its files unchanged
    facts = await replay_run_facts(stores.ledger, plan.replay_id)
    assert facts.writes_executed == []
    assert worlds.base(VERSION, "airline") is base and base.initial_hash == base_hash
    assert base.tables == type(base.tables)(
        (t, json.loads((ENV_DATA / VERSION / "airline" / f"{t}.json").read_text()))
        for t in base.tables
    )
    assert _files_digest(ENV_DATA / VERSION / "airline") == files_before
